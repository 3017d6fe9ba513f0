-- name: state_violation
-- invariant: session and stream ledgers follow the state machines of seed 004 (a repeated state is fine)
-- failure: Session or stream ledgers skip states (a resume without a disconnect, a stream
--   opened twice): the recorder or the server's state machine is out of step.
-- dashboard: Sessions & proxy: a `medium` row per (entity, time) naming the transition.
-- fix: Fix the writer of the ledger so it records every transition of the state machine in
--   order.
-- severity: medium
-- needs: sessions|streams
-- facts: none
-- unit: (entity, ts)
-- page: sessions
WITH session_rows AS (
    SELECT session_hmac, generation, NULL AS stream_id, ts, state,
           lag(state) OVER (PARTITION BY session_hmac ORDER BY ts, file_id, pos) AS prev
    FROM sessions
),
-- A stream whose rows are STREAM_OPEN, then CLOSED, and nothing else (most streams) follows
-- the machine whatever its repeats: only the others are ordered row by row (the window's
-- sort of every stream row by its text keys was most of this query).
in_order AS (
    SELECT session_hmac, generation, stream_id
    FROM streams
    GROUP BY ALL
    HAVING count(*) FILTER (WHERE state IN ('STREAM_OPEN', 'CLOSED')) = count(*)
       AND coalesce(max(record_order(ts, file_id, pos)) FILTER (WHERE state = 'STREAM_OPEN')
                    < min(record_order(ts, file_id, pos)) FILTER (WHERE state = 'CLOSED'),
                    count(*) FILTER (WHERE state = 'CLOSED') = 0)
),
stream_rows AS (
    SELECT s.session_hmac, s.generation, s.stream_id, s.ts, s.state,
           lag(s.state) OVER (PARTITION BY s.session_hmac, s.generation, s.stream_id
                              ORDER BY s.ts, s.file_id, s.pos) AS prev
    FROM streams s
    ANTI JOIN in_order o
      ON s.session_hmac IS NOT DISTINCT FROM o.session_hmac
     AND s.generation IS NOT DISTINCT FROM o.generation
     AND s.stream_id IS NOT DISTINCT FROM o.stream_id
),
allowed(kind, prev, state) AS (
    VALUES ('session', NULL, 'SESSION_ACTIVE'),
           ('session', 'SESSION_ACTIVE', 'DELETE_REQUESTED'),
           ('session', 'SESSION_ACTIVE', 'SESSION_EXPIRED'),
           ('session', 'SESSION_ACTIVE', 'REINITIALIZE_REQUIRED'),
           ('session', 'DELETE_REQUESTED', 'TERMINATED'),
           ('session', 'SESSION_EXPIRED', 'REINITIALIZE_REQUIRED'),
           ('session', 'TERMINATED', 'REINITIALIZE_REQUIRED'),
           ('stream', NULL, 'STREAM_OPEN'),
           ('stream', 'STREAM_OPEN', 'DISCONNECTED'),
           ('stream', 'STREAM_OPEN', 'CLOSED'),
           ('stream', 'DISCONNECTED', 'RESUME_PENDING'),
           ('stream', 'DISCONNECTED', 'CLOSED'),
           ('stream', 'RESUME_PENDING', 'STREAM_OPEN'),
           ('stream', 'RESUME_PENDING', 'CURSOR_REJECTED'),
           ('stream', 'RESUME_PENDING', 'SESSION_EXPIRED'),
           ('stream', 'CURSOR_REJECTED', 'CLOSED'),
           ('stream', 'SESSION_EXPIRED', 'CLOSED')
),
rows AS (
    SELECT 'session' AS kind, * FROM session_rows
    UNION ALL
    SELECT 'stream' AS kind, * FROM stream_rows
)
SELECT DISTINCT r.session_hmac, r.generation, r.stream_id, 'medium' AS severity, r.ts,
       json_object('entity', r.kind, 'from', r.prev, 'to', r.state) AS detail
FROM rows r
WHERE r.prev IS DISTINCT FROM r.state
  AND NOT EXISTS (SELECT 1 FROM allowed a
                   WHERE a.kind = r.kind AND a.state = r.state
                     AND a.prev IS NOT DISTINCT FROM r.prev)

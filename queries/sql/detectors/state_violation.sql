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
-- A session's rows follow the machine whatever their repeats when, in their order, they
-- are SESSION_ACTIVE, then DELETE_REQUESTED (then TERMINATED) or SESSION_EXPIRED or
-- neither, then REINITIALIZE_REQUIRED or not, every row of a state after every row of the
-- states before it on that path (`r`, the rank) and no step skipped (ACTIVE -> TERMINATED,
-- DELETE_REQUESTED -> REINITIALIZE_REQUIRED): every session of the simulated fleets but
-- those with a violation. Only the others are ordered row by row (the window's sort of
-- every session row was a third of this query at 10M events). The condition is never
-- NULL (a row of another state, or none, has no rank), so its negation keeps exactly the
-- sessions it leaves out.
WITH ranked AS (
    SELECT session_hmac, state, record_order(ts, file_id, pos) AS o,
           CASE state WHEN 'SESSION_ACTIVE' THEN 1 WHEN 'DELETE_REQUESTED' THEN 2
                      WHEN 'SESSION_EXPIRED' THEN 2 WHEN 'TERMINATED' THEN 3
                      WHEN 'REINITIALIZE_REQUIRED' THEN 4 END AS r
    FROM sessions
),
sessions_out_of_order AS (
    SELECT session_hmac
    FROM ranked
    GROUP BY session_hmac
    HAVING NOT (count(r) = count(*) AND count(o) = count(*)
       AND count(*) FILTER (WHERE r = 1) > 0
       AND NOT (count(*) FILTER (WHERE state = 'DELETE_REQUESTED') > 0
                AND count(*) FILTER (WHERE state = 'SESSION_EXPIRED') > 0)
       AND (count(*) FILTER (WHERE r = 3) = 0
            OR count(*) FILTER (WHERE state = 'DELETE_REQUESTED') > 0)
       AND (count(*) FILTER (WHERE r = 4) = 0
            OR count(*) FILTER (WHERE state = 'DELETE_REQUESTED') = 0
            OR count(*) FILTER (WHERE r = 3) > 0)
       AND coalesce(max(o) FILTER (WHERE r = 1) < min(o) FILTER (WHERE r > 1), true)
       AND coalesce(max(o) FILTER (WHERE r = 2) < min(o) FILTER (WHERE r > 2), true)
       AND coalesce(max(o) FILTER (WHERE r = 3) < min(o) FILTER (WHERE r > 3), true))
),
session_rows AS (
    SELECT s.session_hmac, s.generation, NULL AS stream_id, s.ts, s.state,
           lag(s.state) OVER (PARTITION BY s.session_hmac ORDER BY s.ts, s.file_id, s.pos) AS prev
    FROM sessions s
    SEMI JOIN sessions_out_of_order o ON s.session_hmac IS NOT DISTINCT FROM o.session_hmac
),
-- A stream whose rows are STREAM_OPEN, then CLOSED, and nothing else (most streams) follows
-- the machine whatever its repeats: only the others are ordered row by row (the window's
-- sort of every stream row by its text keys was most of this query). Their rows are looked
-- up by a 64-bit hash of the stream's three keys among the hashes of the streams out of
-- order (a semi join building on those; by the keys themselves, a hash table of their text,
-- it grew x21 from 10M to 100M events, the data x10). A stream in order whose hash is one
-- of theirs is ordered too, by its own keys, and adds no row: its transitions are NULL to
-- STREAM_OPEN, STREAM_OPEN to CLOSED and repeats, all allowed. A stream logged without its
-- session, generation or id hashes as its NULLs do, so its rows are found as the NULL-safe
-- join found them. The condition is never NULL, so its negation keeps exactly the streams
-- it leaves out.
out_of_order AS (
    SELECT hash(session_hmac, generation, stream_id) AS h
    FROM streams
    GROUP BY session_hmac, generation, stream_id
    HAVING NOT (count(*) FILTER (WHERE state IN ('STREAM_OPEN', 'CLOSED')) = count(*)
       AND coalesce(max(record_order(ts, file_id, pos)) FILTER (WHERE state = 'STREAM_OPEN')
                    < min(record_order(ts, file_id, pos)) FILTER (WHERE state = 'CLOSED'),
                    count(*) FILTER (WHERE state = 'CLOSED') = 0))
),
stream_rows AS (
    SELECT s.session_hmac, s.generation, s.stream_id, s.ts, s.state,
           lag(s.state) OVER (PARTITION BY s.session_hmac, s.generation, s.stream_id
                              ORDER BY s.ts, s.file_id, s.pos) AS prev
    FROM streams s
    SEMI JOIN out_of_order o ON hash(s.session_hmac, s.generation, s.stream_id) = o.h
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

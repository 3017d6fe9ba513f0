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
-- sessions it leaves out. Which states a session has is one `bit_or` of a bit per state
-- (`f`; 64 for a row of no rank or without a time), not a count per state, and rows are
-- compared by their time alone (`epoch_us`, 8 bytes a state, not record_order's 16 of
-- time, file and place): a state tied in time with the next one fails the strict
-- comparison, and such a ledger is ordered row by row, by time, file and place, as any
-- other out of order, so the rows found are the same. (Each state of the grouping is held
-- for every session: 5M at 100M events.)
WITH ranked AS (
    SELECT session_hmac, state, epoch_us(ts) AS o,
           CASE state WHEN 'SESSION_ACTIVE' THEN 1 WHEN 'DELETE_REQUESTED' THEN 2
                      WHEN 'SESSION_EXPIRED' THEN 2 WHEN 'TERMINATED' THEN 3
                      WHEN 'REINITIALIZE_REQUIRED' THEN 4 END AS r,
           CASE WHEN ts IS NULL THEN 64
                ELSE CASE state WHEN 'SESSION_ACTIVE' THEN 1 WHEN 'DELETE_REQUESTED' THEN 2
                                WHEN 'SESSION_EXPIRED' THEN 4 WHEN 'TERMINATED' THEN 8
                                WHEN 'REINITIALIZE_REQUIRED' THEN 16 ELSE 64 END END AS f
    FROM sessions
),
sessions_out_of_order AS (
    SELECT session_hmac
    FROM ranked
    GROUP BY session_hmac
    HAVING NOT (bit_or(f) & 64 = 0
       AND bit_or(f) & 1 > 0
       AND bit_or(f) & 6 <> 6
       AND (bit_or(f) & 8 = 0 OR bit_or(f) & 2 > 0)
       AND (bit_or(f) & 16 = 0 OR bit_or(f) & 2 = 0 OR bit_or(f) & 8 > 0)
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
-- A stream whose rows are STREAM_OPEN, then DISCONNECTED or not, then CLOSED or not, and
-- nothing else (every stream not resumed) follows the machine whatever its repeats: none of
-- those states leads back to an earlier one, so every row of a state after every row of the
-- states before it is a path of the machine (DISCONNECTED only comes after STREAM_OPEN, and
-- CLOSED after either). Only the others are ordered row by row: the streams resumed, a few
-- of every stream (the disconnected streams were ordered too, 7.0M rows at 100M events,
-- their window and look-up as much as the grouping). Their rows are found by the session
-- key alone first (one key: DuckDB filters the scan by a Bloom filter of those sessions),
-- a stream logged without its session as the NULL-safe look-up found it; then by a 64-bit
-- hash of the stream's three keys among the hashes of the streams out of order (a semi join
-- building on those; by the keys themselves, a hash table of their text, it grew x21 from
-- 10M to 100M events). A stream in order whose hash is one of theirs is ordered too, by its
-- own keys, and adds no row: its transitions are all allowed. The condition is never NULL
-- (each coalesce falls back on a value: a stream without a STREAM_OPEN row is out of
-- order), so its negation keeps exactly the streams it leaves out; rows tied in time are
-- ordered row by row, as the sessions' are.
out_of_order AS MATERIALIZED (
    SELECT session_hmac, hash(session_hmac, generation, stream_id) AS h
    FROM streams
    GROUP BY session_hmac, generation, stream_id
    HAVING NOT (bool_and(coalesce(state IN ('STREAM_OPEN', 'DISCONNECTED', 'CLOSED'), false))
       AND coalesce(max(epoch_us(ts)) FILTER (WHERE state = 'STREAM_OPEN')
                    < min(epoch_us(ts)) FILTER (WHERE state IN ('DISCONNECTED', 'CLOSED')),
                    max(epoch_us(ts)) FILTER (WHERE state = 'STREAM_OPEN') IS NOT NULL)
       AND coalesce(max(epoch_us(ts)) FILTER (WHERE state = 'DISCONNECTED')
                    < min(epoch_us(ts)) FILTER (WHERE state = 'CLOSED'),
                    true))
),
session_stream_rows AS MATERIALIZED (
    SELECT s.session_hmac, s.generation, s.stream_id, s.ts, s.file_id, s.pos, s.state
    FROM streams s
    SEMI JOIN (SELECT DISTINCT session_hmac FROM out_of_order) k
      ON k.session_hmac = s.session_hmac
    UNION ALL
    SELECT s.session_hmac, s.generation, s.stream_id, s.ts, s.file_id, s.pos, s.state
    FROM streams s
    WHERE s.session_hmac IS NULL
      AND EXISTS (SELECT 1 FROM out_of_order WHERE session_hmac IS NULL)
),
stream_rows AS (
    SELECT s.session_hmac, s.generation, s.stream_id, s.ts, s.state,
           lag(s.state) OVER (PARTITION BY s.session_hmac, s.generation, s.stream_id
                              ORDER BY s.ts, s.file_id, s.pos) AS prev
    FROM session_stream_rows s
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

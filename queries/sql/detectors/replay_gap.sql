-- name: replay_gap
-- invariant: a client accepts every event of a stream up to its last accepted one, and on a completed stream every event the server produced; priming and heartbeats aside
-- failure: A server drops events under backpressure (or a bounded replay buffer evicts them)
--   and keeps honouring Last-Event-ID: the resumed stream skips them and the client never
--   learns they existed.
-- reports: Cocoanetics/SwiftMCP PR 109 and an OloEngine diagnostics server (bounded replay
--   buffers of 256 or 512 events that evict a reconnecting client's events)
-- dashboard: Streams & replay: a `high` row per stream when a message, result or cumulative
--   event is missing (`low` for progress only); the detail lists the missing seqs and kinds;
--   the inspector shows the hole between accepted events.
-- fix: Apply backpressure by slowing the producer, never by dropping answer-carrying events;
--   keep a gapless event log for as long as a cursor can come back, or declare the stream lossy
--   so clients re-fetch state.
-- severity: high, low
-- needs: inbox|events, inbox|streams
-- facts: none
-- unit: stream (origin)
-- page: streams
-- Basis `client` (sessions with inbox receipts): seqs the client never accepted. Basis
-- `server` (sessions without): events the server's own log shows it never delivered —
-- dropped and never sent later, or stored after a resume's cursor and not replayed.
-- Severity is high when a missing event changes the answer (cumulative, message, result,
-- error) or its kind is unknown to the event log.
WITH missing AS (
    SELECT 'client' AS basis, session_hmac, generation, stream_id, seq, kind, cumulative,
           first_ts
    FROM a_missing
    UNION ALL
    SELECT 'server', session_hmac, generation, stream_id, seq, kind, cumulative, first_ts
    FROM a_server_missing
),
gaps AS (
    SELECT session_hmac, generation, stream_id,
           CASE WHEN bool_or(changes_answer(cumulative, kind))
                THEN 'high' ELSE 'low' END AS severity,
           min(first_ts) AS first_ts,
           json_object('basis', min(basis),
                       'missing_seqs', list(DISTINCT seq ORDER BY seq),
                       'missing_kinds', list(coalesce(kind, 'unknown') ORDER BY seq, kind))
               AS detail
    FROM missing
    GROUP BY session_hmac, generation, stream_id
),
-- A stream none of whose missing events the log dates is dated by its first ledger row (of
-- any generation), looked up for the sessions of such streams alone, by the session key
-- (a join on one key lets DuckDB filter the scan by those sessions): a lookup per gap (a
-- correlated subquery) had DuckDB group every ledger row by stream first, 16M groups at
-- 100M events, for gaps the log dates all but always.
opened AS (
    SELECT s.session_hmac, s.stream_id, min(s.ts) AS ts
    FROM streams s
    SEMI JOIN (SELECT DISTINCT session_hmac FROM gaps WHERE first_ts IS NULL) u
      ON u.session_hmac = s.session_hmac
    GROUP BY ALL
)
SELECT g.session_hmac, g.generation, g.stream_id, g.severity,
       coalesce(g.first_ts, o.ts) AS ts, g.detail
FROM gaps g
LEFT JOIN opened o ON o.session_hmac = g.session_hmac AND o.stream_id = g.stream_id

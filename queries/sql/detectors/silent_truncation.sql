-- name: silent_truncation
-- invariant: no operation closes with an accepted result while an answer-changing event of its stream is missing
-- failure: A stream whose cumulative messages were dropped still delivers its final result, so
--   the client closes the operation with a complete-looking, wrong answer.
-- reports: cloudflare/agents PR 1607 (a server clears a stream's stored events when it closes,
--   so a reconnecting client never gets what it missed)
-- dashboard: Overview: the `silent_truncations` gate fails; Streams & replay lists a `critical`
--   row per stream next to its `high` replay gap.
-- fix: Never drop cumulative or terminal events; when a replay had a gap, make the client
--   discard the accumulated stream and read the final state explicitly.
-- severity: critical
-- needs: inbox|events, inbox|streams
-- facts: none
-- unit: stream
-- page: streams
-- Basis `client`: the client accepted the stream's result. Basis `server` (sessions without
-- receipts): the server delivered the result (not dropped, and the stream closed
-- `completed`, which the recorder writes only once the result went out).
WITH high_gaps AS (
    SELECT 'client' AS basis, session_hmac, generation, stream_id,
           list(seq ORDER BY seq) AS missing_seqs
    FROM a_missing
    GROUP BY ALL
    HAVING bool_or(changes_answer(cumulative, kind))
    UNION ALL
    SELECT 'server', session_hmac, generation, stream_id, list(DISTINCT seq ORDER BY seq)
    FROM a_server_missing
    GROUP BY ALL
    HAVING bool_or(changes_answer(cumulative, kind))
),
-- The accepted results of the high gaps' sessions are found by the session key alone
-- first: a join on one key lets DuckDB filter the scans of the receipts by those few
-- sessions (a Bloom filter), a join on three keys only by their range, so every accepted
-- result was read and probed (3.8M of 151M receipts at 100M events).
client_receipts AS MATERIALIZED (
    SELECT i.session_hmac, i.generation, i.origin_stream_id, i.ts, i.event_id
    FROM a_inbox i
    SEMI JOIN (SELECT DISTINCT session_hmac FROM high_gaps WHERE basis = 'client') k
      ON k.session_hmac = i.session_hmac
    WHERE i.verdict = 'accepted' AND i.kind = 'result'
),
client_results AS (
    SELECT g.session_hmac, g.generation, g.stream_id, min(i.ts) AS ts,
           min(i.event_id) AS event_id
    FROM high_gaps g
    JOIN client_receipts i
      ON i.session_hmac = g.session_hmac AND i.generation = g.generation
     AND i.origin_stream_id = g.stream_id
    WHERE g.basis = 'client'
    GROUP BY ALL
),
-- (the same for the server's delivered results and completed ledger rows)
server_events AS MATERIALIZED (
    SELECT e.session_hmac, e.generation, e.stream_id, e.event_id
    FROM a_event_index e
    SEMI JOIN (SELECT DISTINCT session_hmac FROM high_gaps WHERE basis = 'server') k
      ON k.session_hmac = e.session_hmac
    WHERE e.kind = 'result' AND e.delivered
),
server_closes AS MATERIALIZED (
    SELECT c.session_hmac, c.generation, c.stream_id, c.ts
    FROM streams c
    SEMI JOIN (SELECT DISTINCT session_hmac FROM server_events) k
      ON k.session_hmac = c.session_hmac
    WHERE is_completed(c.state, c.close_reason)
),
server_results AS (
    SELECT g.session_hmac, g.generation, g.stream_id, min(c.ts) AS ts,
           min(e.event_id) AS event_id
    FROM high_gaps g
    JOIN server_events e
      ON e.session_hmac = g.session_hmac AND e.generation = g.generation
     AND e.stream_id = g.stream_id
    JOIN server_closes c
      ON c.session_hmac = g.session_hmac AND c.generation = g.generation
     AND c.stream_id = g.stream_id
    WHERE g.basis = 'server'
    GROUP BY ALL
),
results AS (
    SELECT 'client' AS basis, * FROM client_results
    UNION ALL
    SELECT 'server', * FROM server_results
)
SELECT g.session_hmac, g.generation, g.stream_id, 'critical' AS severity, r.ts,
       json_object('basis', g.basis, 'missing_seqs', g.missing_seqs,
                   'result_event_id', r.event_id) AS detail
FROM high_gaps g
JOIN results r USING (basis, session_hmac, generation, stream_id)

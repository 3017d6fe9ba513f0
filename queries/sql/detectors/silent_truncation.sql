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
client_results AS (
    SELECT g.session_hmac, g.generation, g.stream_id, min(i.ts) AS ts,
           min(i.event_id) AS event_id
    FROM high_gaps g
    JOIN a_inbox i
      ON i.session_hmac = g.session_hmac AND i.generation = g.generation
     AND i.origin_stream_id = g.stream_id
    WHERE g.basis = 'client' AND i.verdict = 'accepted' AND i.kind = 'result'
    GROUP BY ALL
),
server_results AS (
    SELECT g.session_hmac, g.generation, g.stream_id, min(c.ts) AS ts,
           min(e.event_id) AS event_id
    FROM high_gaps g
    JOIN a_event_index e
      ON e.session_hmac = g.session_hmac AND e.generation = g.generation
     AND e.stream_id = g.stream_id
    JOIN streams c
      ON c.session_hmac = g.session_hmac AND c.generation = g.generation
     AND c.stream_id = g.stream_id
    WHERE g.basis = 'server' AND e.kind = 'result' AND e.delivered
      AND is_completed(c.state, c.close_reason)
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

-- name: silent_truncation
-- invariant: no operation closes with an accepted result while an answer-changing event of its stream is missing
-- severity: critical
-- needs: inbox, events, streams
-- facts: none
-- unit: stream
-- page: streams
WITH high_gaps AS (
    SELECT session_hmac, generation, stream_id, list(seq ORDER BY seq) AS missing_seqs
    FROM a_missing
    GROUP BY ALL
    HAVING bool_or(cumulative OR kind IN ('message', 'result', 'error') OR kind IS NULL)
)
SELECT g.session_hmac, g.generation, g.stream_id, 'critical' AS severity,
       min(i.ts) AS ts,
       json_object('missing_seqs', any_value(g.missing_seqs),
                   'result_event_id', min(i.event_id)) AS detail
FROM high_gaps g
JOIN a_inbox i
  ON i.session_hmac = g.session_hmac AND i.generation = g.generation
 AND i.origin_stream_id = g.stream_id
WHERE i.verdict = 'accepted' AND i.kind = 'result'
GROUP BY g.session_hmac, g.generation, g.stream_id

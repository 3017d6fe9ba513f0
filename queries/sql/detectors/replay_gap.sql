-- name: replay_gap
-- invariant: a client accepts every event of a stream up to its last accepted one, and on a completed stream every event the server produced; priming and heartbeats aside
-- severity: high, low
-- needs: inbox, events, streams
-- facts: none
-- unit: stream (origin)
-- page: streams
-- Severity is high when a missing event changes the answer (cumulative, message, result,
-- error) or its kind is unknown to the event log.
SELECT session_hmac, generation, stream_id,
       CASE WHEN bool_or(cumulative OR kind IN ('message', 'result', 'error') OR kind IS NULL)
            THEN 'high' ELSE 'low' END AS severity,
       coalesce(min(first_ts), (SELECT min(s.ts) FROM streams s
                                 WHERE s.session_hmac = m.session_hmac
                                   AND s.stream_id = m.stream_id)) AS ts,
       json_object('missing_seqs', list(seq ORDER BY seq),
                   'missing_kinds', list(coalesce(kind, 'unknown') ORDER BY seq)) AS detail
FROM a_missing m
GROUP BY session_hmac, generation, stream_id

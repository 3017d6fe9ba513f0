-- name: cross_stream_acceptance
-- invariant: a client accepts an event only on the stream the event belongs to
-- severity: critical
-- needs: inbox, events
-- facts: none
-- unit: receipt (session_hmac, generation, stream_id, event_id)
-- page: streams
SELECT session_hmac, generation, stream_id, event_id, 'critical' AS severity, min(ts) AS ts,
       json_object('origin_stream_id', any_value(origin_stream_id),
                   'origin_seq', any_value(seq)) AS detail
FROM a_inbox
WHERE verdict = 'accepted' AND origin_stream_id IS NOT NULL AND origin_stream_id <> stream_id
GROUP BY session_hmac, generation, stream_id, event_id

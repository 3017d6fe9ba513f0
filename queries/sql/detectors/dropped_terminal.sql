-- name: dropped_terminal
-- invariant: a result or error event is never dropped under backpressure
-- severity: critical
-- needs: events
-- facts: none
-- unit: stream
-- page: streams
SELECT session_hmac, generation, stream_id, 'critical' AS severity, min(ts) AS ts,
       min(event_id) AS event_id,
       json_object('kinds', list(DISTINCT kind), 'dropped', count(*)) AS detail
FROM events
WHERE disposition = 'dropped' AND kind IN ('result', 'error')
GROUP BY session_hmac, generation, stream_id

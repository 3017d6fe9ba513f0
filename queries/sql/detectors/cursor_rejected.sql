-- name: cursor_rejected
-- invariant: resumes present cursors the server still holds (informational: a rejection is safe, but costs a re-request)
-- severity: low
-- needs: streams
-- facts: none
-- unit: stream
-- page: streams
SELECT session_hmac, generation, stream_id, 'low' AS severity, min(ts) AS ts,
       json_object('rejections', count(*)) AS detail
FROM streams
WHERE state = 'CURSOR_REJECTED'
GROUP BY session_hmac, generation, stream_id

-- name: cursor_misrouted
-- invariant: a stream resumes only from a Last-Event-ID of its own
-- severity: critical
-- needs: streams, events
-- unit: stream
WITH ordered AS (
    SELECT *, lead(state) OVER (PARTITION BY session_hmac, generation, stream_id
                                ORDER BY ts, file_id, pos) AS next_state
    FROM streams
)
SELECT o.session_hmac, o.generation, o.stream_id, 'critical' AS severity, min(o.ts) AS ts,
       json_object('resume_from_event_id', min(o.resume_from_event_id),
                   'cursor_stream_id', min(e.stream_id)) AS detail
FROM ordered o
JOIN a_event_index e
  ON e.session_hmac = o.session_hmac AND e.generation = o.generation
 AND e.event_id = o.resume_from_event_id
WHERE o.state = 'RESUME_PENDING' AND o.next_state = 'STREAM_OPEN'
  AND e.stream_id <> o.stream_id
GROUP BY o.session_hmac, o.generation, o.stream_id

-- name: cursor_misrouted
-- invariant: a stream resumes only from a Last-Event-ID of its own
-- failure: A client resumes one stream with the Last-Event-ID of another (for example its
--   standalone GET stream) and the server serves it anyway, mixing two requests' events.
-- dashboard: Streams & replay: a `critical` row per stream; the detail names the stream the
--   cursor really belongs to.
-- fix: Servers resolve a cursor to its own stream and answer a foreign one with an error;
--   clients keep one cursor per stream.
-- severity: critical
-- needs: streams, events
-- facts: streams.resume_from_event_id
-- units: streams WHERE state = 'RESUME_PENDING' BY session_hmac, generation, stream_id
-- unit: stream
-- page: streams
-- The cursor at a resume is read from a_resumes (prep), where every cursor rule reads it.
SELECT session_hmac, generation, stream_id, 'critical' AS severity, min(ts) AS ts,
       json_object('resume_from_event_id', min(resume_from_event_id),
                   'cursor_stream_id', min(cursor_stream_id)) AS detail
FROM a_resumes
WHERE next_state = 'STREAM_OPEN' AND cursor_stream_id <> stream_id
GROUP BY session_hmac, generation, stream_id

-- name: unrecovered_stream
-- invariant: a stream that asked to resume is open again or closed by the end of the data
-- failure: A client asks to resume and the stream never opens again or closes: the request is
--   left hanging and its answer never arrives.
-- dashboard: Streams & replay: a `medium` row per stream with the time it was pending since;
--   the inspector ends with RESUME_PENDING.
-- fix: Answer every resume with the replay or with an error; clients time a resume out and
--   re-issue the request.
-- severity: medium
-- needs: streams
-- facts: none
-- unit: stream
-- page: streams
WITH marks AS (
    SELECT session_hmac, generation, stream_id,
           min(ts) FILTER (WHERE state = 'DISCONNECTED') AS first_disc,
           max(ts) FILTER (WHERE state = 'RESUME_PENDING') AS last_pending,
           max(ts) FILTER (WHERE state IN ('STREAM_OPEN', 'CLOSED')) AS last_settled
    FROM streams
    GROUP BY ALL
)
SELECT session_hmac, generation, stream_id, 'medium' AS severity, last_pending AS ts,
       json_object('pending_since', last_pending) AS detail
FROM marks
WHERE first_disc IS NOT NULL AND last_pending > first_disc
  AND (last_settled IS NULL OR last_settled < last_pending)

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
-- Only a stream with a RESUME_PENDING row can be one (its last is after its first break):
-- the rows of those streams alone are grouped (24,196 of 1.6M streams at 10M events),
-- looked up by a 64-bit hash of the stream's three keys among those streams' hashes: a
-- join on three text keys probed a table of their 64-character keys with every stream row
-- (x12 from 10M to 100M events), one on a hash probes a table of 8-byte keys. A stream
-- whose hash equals one of theirs is grouped too, by its own keys, and has no
-- RESUME_PENDING row, so it is no finding; a stream logged without its session, or its
-- generation or id, hashes as its NULLs do and is one group, as the grouping of every
-- stream row made it.
WITH pending AS (
    SELECT DISTINCT hash(session_hmac, generation, stream_id) AS h FROM streams
    WHERE state = 'RESUME_PENDING'
),
marks AS (
    SELECT s.session_hmac, s.generation, s.stream_id,
           min(s.ts) FILTER (WHERE s.state = 'DISCONNECTED') AS first_disc,
           max(s.ts) FILTER (WHERE s.state = 'RESUME_PENDING') AS last_pending,
           max(s.ts) FILTER (WHERE s.state IN ('STREAM_OPEN', 'CLOSED')) AS last_settled
    FROM streams s
    SEMI JOIN pending p ON hash(s.session_hmac, s.generation, s.stream_id) = p.h
    GROUP BY ALL
)
SELECT session_hmac, generation, stream_id, 'medium' AS severity, last_pending AS ts,
       json_object('pending_since', last_pending) AS detail
FROM marks
WHERE first_disc IS NOT NULL AND last_pending > first_disc
  AND (last_settled IS NULL OR last_settled < last_pending)

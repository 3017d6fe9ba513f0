-- name: priming_lost
-- invariant: on a resumable session, a stream's client holds a cursor (an accepted event) before the stream can break
-- severity: medium
-- needs: streams, inbox, sessions
-- facts: sessions.resumable|sessions.protocol_version
-- units: streams WHERE state = 'DISCONNECTED' BY session_hmac, generation, stream_id
-- unit: stream
-- page: streams
WITH first_disc AS (
    SELECT session_hmac, generation, stream_id, min(ts) AS ts
    FROM streams WHERE state = 'DISCONNECTED' GROUP BY ALL
),
first_acc AS (
    SELECT session_hmac, generation, origin_stream_id AS stream_id, min(ts) AS ts
    FROM a_inbox WHERE verdict = 'accepted' AND origin_stream_id IS NOT NULL GROUP BY ALL
)
SELECT d.session_hmac, d.generation, d.stream_id, 'medium' AS severity, d.ts,
       json_object('first_accepted', a.ts) AS detail
FROM first_disc d
JOIN a_sessions s ON s.session_hmac = d.session_hmac AND s.resumable
LEFT JOIN first_acc a
  ON a.session_hmac = d.session_hmac AND a.generation = d.generation
 AND a.stream_id = d.stream_id
WHERE (a.ts IS NULL OR a.ts > d.ts)
  -- A receipt accepted before the break whose origin stream is unknown (no
  -- origin_stream_id and no event log to resolve it) may have been this stream's: the
  -- client may have held a cursor, so absence cannot be claimed.
  AND NOT EXISTS (
        SELECT 1 FROM a_inbox u
         WHERE u.session_hmac = d.session_hmac AND u.generation = d.generation
           AND u.verdict = 'accepted' AND u.origin_stream_id IS NULL AND u.ts <= d.ts)

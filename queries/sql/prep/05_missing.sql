-- name: a_missing
-- purpose: events a client never accepted although it accepted later ones of the same
--          ORIGIN stream (holes), or, on a completed stream, events after its last accepted
--          one (tail). Priming and heartbeat events never count.
-- needs: inbox, events, streams
CREATE OR REPLACE TABLE a_missing AS
WITH acc AS (
    SELECT DISTINCT session_hmac, generation, origin_stream_id AS stream_id, seq
    FROM a_inbox
    WHERE verdict = 'accepted' AND seq IS NOT NULL AND origin_stream_id IS NOT NULL
),
steps AS (
    SELECT *, lag(seq) OVER (PARTITION BY session_hmac, generation, stream_id ORDER BY seq)
                  AS prev
    FROM acc
),
holes AS (
    SELECT session_hmac, generation, stream_id, unnest(range(prev + 1, seq)) AS seq
    FROM steps
    WHERE seq > prev + 1
),
completed AS (
    SELECT DISTINCT session_hmac, generation, stream_id
    FROM streams
    WHERE state = 'CLOSED' AND close_reason = 'completed'
),
last_acc AS (
    SELECT session_hmac, generation, stream_id, max(seq) AS hi FROM acc GROUP BY ALL
),
tail AS (
    SELECT e.session_hmac, e.generation, e.stream_id, e.seq
    FROM a_event_index e
    JOIN completed c USING (session_hmac, generation, stream_id)
    LEFT JOIN last_acc l USING (session_hmac, generation, stream_id)
    WHERE e.seq > coalesce(l.hi, -1)
),
missing AS (
    SELECT * FROM holes
    UNION
    SELECT * FROM tail
)
SELECT m.session_hmac, m.generation, m.stream_id, m.seq,
       e.kind, coalesce(e.cumulative, false) AS cumulative, e.first_ts, e.event_id
FROM missing m
LEFT JOIN (SELECT DISTINCT ON (session_hmac, generation, stream_id, seq) *
           FROM a_event_index) e
    USING (session_hmac, generation, stream_id, seq)
WHERE coalesce(e.kind, '?') NOT IN ('priming', 'heartbeat');

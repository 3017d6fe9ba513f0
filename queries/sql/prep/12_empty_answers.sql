-- name: a_empty_answers
-- purpose: each POST a proxy answered 2xx with an event stream of 0 body bytes
--          (`empty_event_stream`: its client got none of the stream's bytes, not the
--          priming event, not its `retry:`), on the POST stream(s) of its session nearest
--          its run: by request id where both sides have one, else opened within a second
--          of the run, each at its distance in ms (0 inside it). One row per stream at the
--          least distance, `n` = how many are that near (more than one: it cannot be
--          placed). Defined once for every rule that asks whether a stream reached its
--          client.
-- needs: streams, proxy
CREATE OR REPLACE TABLE a_empty_answers AS
WITH empty AS (
    SELECT ts, session_hmac, request_id, duration_ms, file_id, pos
    FROM proxy
    WHERE empty_event_stream(method, status, body_bytes_sent, resp_content_type)
),
candidates AS (
    SELECT e.file_id, e.pos, p.session_hmac, p.generation, p.stream_id,
           CASE WHEN e.request_id IS NOT NULL AND p.request_id IS NOT NULL THEN 0
                ELSE greatest(epoch_ms(e.ts) - epoch_ms(p.opened_ts),
                              epoch_ms(p.opened_ts) - epoch_ms(e.ts)
                                  - coalesce(e.duration_ms, 0),
                              0) END AS dist
    FROM empty e
    JOIN a_streams p
      ON p.session_hmac = e.session_hmac
     AND CASE WHEN e.request_id IS NOT NULL AND p.request_id IS NOT NULL
              THEN p.request_id = e.request_id
              ELSE epoch_ms(p.opened_ts) BETWEEN epoch_ms(e.ts) - 1000
                   AND epoch_ms(e.ts) + coalesce(e.duration_ms, 0) + 1000 END
    WHERE p.method = 'POST'
)
SELECT file_id, pos, session_hmac, generation, stream_id,
       count(*) OVER (PARTITION BY file_id, pos) AS n
FROM (SELECT *, min(dist) OVER (PARTITION BY file_id, pos) AS best FROM candidates)
WHERE dist = best;

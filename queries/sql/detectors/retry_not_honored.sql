-- name: retry_not_honored
-- invariant: a client waits the server's SSE retry before reconnecting a stream
-- failure: A client ignores the SSE `retry:` directive and reconnects at once, adding load
--   exactly when the server asked for time.
-- reports: simonx1/ruby-mcp-client PR 168 (the client ignored the server's SSE `retry:`
--   directive)
-- dashboard: Streams & replay: a `low` row per stream with the milliseconds waited and the
--   retry asked for; Sessions & proxy: reconnect peaks.
-- fix: Parse `retry:` and wait at least that long (plus jitter) before reconnecting; bound
--   reconnects with a global budget.
-- severity: low
-- needs: streams
-- facts: streams.retry_ms
-- units: streams WHERE state = 'DISCONNECTED' BY session_hmac, generation, stream_id
-- unit: stream
-- page: streams
SELECT session_hmac, generation, stream_id, 'low' AS severity, min(disc_ts) AS ts,
       json_object('waited_ms', min(epoch_ms(reconnect_ts) - epoch_ms(disc_ts)),
                   'retry_ms', min(retry_ms)) AS detail
FROM a_recoveries
WHERE reconnect_ts IS NOT NULL AND retry_ms IS NOT NULL
  AND epoch_ms(reconnect_ts) - epoch_ms(disc_ts) < retry_ms
  -- 'client_lost': the server learned of the break only from the reconnect itself, so
  -- the gap says nothing about how long the client waited.
  AND coalesce(close_reason, '') <> 'client_lost'
  -- a stream a proxy served with no body bytes never brought its client the `retry:` (nor
  -- anything else): what the client did next is not an answer to a directive it never got
  AND NOT EXISTS (SELECT 1 FROM a_empty_answers e
                   WHERE e.session_hmac = a_recoveries.session_hmac
                     AND e.generation = a_recoveries.generation
                     AND e.stream_id = a_recoveries.stream_id AND e.n = 1)

GROUP BY session_hmac, generation, stream_id

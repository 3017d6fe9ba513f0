-- name: a_event_index
-- purpose: one row per event id of a session: the stream it belongs to, its seq and kind.
--          Event ids are opaque (stream:seq, stream_ms_rand, uuid): the log tells, we never parse
-- needs: events
CREATE OR REPLACE TABLE a_event_index AS
SELECT session_hmac, generation, event_id,
       any_value(stream_id) AS stream_id,
       any_value(seq) AS seq,
       any_value(kind) AS kind,
       bool_or(coalesce(cumulative, false)) AS cumulative,
       min(ts) AS first_ts,
       bool_or(disposition = 'dropped') AS dropped,
       bool_or(disposition = 'replayed') AS replayed
FROM events
GROUP BY session_hmac, generation, event_id;

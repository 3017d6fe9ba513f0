-- name: a_event_index
-- purpose: one row per event id of a session: the stream it belongs to, its seq and kind.
--          Event ids are opaque (stream:seq, stream_ms_rand, uuid): the log tells, we never parse.
--          The stream is the one that produced it: a `replayed` row names the stream it was
--          replayed on, which differs from it when a replay crossed streams.
-- needs: events
CREATE OR REPLACE TABLE a_event_index AS
SELECT session_hmac, generation, event_id,
       coalesce(arg_min(stream_id, (ts, file_id, pos)) FILTER (WHERE disposition <> 'replayed'),
                min(stream_id)) AS stream_id,
       coalesce(arg_min(seq, (ts, file_id, pos)) FILTER (WHERE disposition <> 'replayed'),
                min(seq)) AS seq,
       min(kind) AS kind,
       bool_or(coalesce(cumulative, false)) AS cumulative,
       min(ts) AS first_ts,
       bool_or(disposition = 'dropped') AS dropped,
       bool_or(disposition = 'replayed') AS replayed,
       bool_or(disposition IN ('sent', 'replayed')) AS delivered
FROM events
GROUP BY session_hmac, generation, event_id;

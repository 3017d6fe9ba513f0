-- name: a_streams
-- purpose: one row per stream: when it first opened, with what request, in which session,
--          and how it ended (its last state; whether its ledger records close reasons)
-- needs: streams
CREATE OR REPLACE TABLE a_streams AS
SELECT session_hmac, generation, stream_id,
       min(ts) AS opened_ts,
       max(ts) AS last_ts,
       arg_min(payload_digest, o) FILTER (WHERE payload_digest IS NOT NULL) AS payload_digest,
       arg_min(request_id, o) FILTER (WHERE request_id IS NOT NULL) AS request_id,
       arg_min(method, o) FILTER (WHERE method IS NOT NULL) AS method,
       arg_min(tool_class, o) FILTER (WHERE tool_class IS NOT NULL) AS tool_class,
       arg_min(tool_name, o) FILTER (WHERE tool_name IS NOT NULL) AS tool_name,
       arg_max(state, o) AS last_state,
       bool_or(state = 'DISCONNECTED') AS disconnected,
       bool_or(is_completed(state, close_reason)) AS completed,
       -- a ledger that records no close reason cannot show a completed stream
       bool_or(close_reason IS NOT NULL) AS reasoned
-- (o: record_order, the struct (ts, file_id, pos) as one number)
FROM (SELECT *, record_order(ts, file_id, pos) AS o FROM streams)
GROUP BY ALL;

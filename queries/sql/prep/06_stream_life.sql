-- name: a_streams
-- purpose: one row per stream: when it first opened, with what request, in which session,
--          and how it ended (its last state; whether its ledger records close reasons)
-- needs: streams
-- The session key and the payload digest are stored uncompressed: a stream's 64-character
-- hex digest is its own and its session's key is scattered over the grouping's output, so
-- DuckDB's string compression (FSST) gains about half their bytes and cost about a third of
-- the step at 10M events (the table grows by about 120 MB there; a reader scans them as
-- they are). The other columns compress as DuckDB chooses.
CREATE OR REPLACE TABLE a_streams (
    session_hmac VARCHAR USING COMPRESSION uncompressed,
    generation BIGINT,
    stream_id VARCHAR,
    opened_ts TIMESTAMPTZ,
    last_ts TIMESTAMPTZ,
    payload_digest VARCHAR USING COMPRESSION uncompressed,
    request_id VARCHAR,
    method VARCHAR,
    tool_class VARCHAR,
    tool_name VARCHAR,
    last_state VARCHAR,
    disconnected BOOLEAN,
    completed BOOLEAN,
    reasoned BOOLEAN
);

INSERT INTO a_streams
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

-- name: a_streams
-- purpose: one row per stream: when it first opened, with what request, in which session,
--          and how it ended (its last state; whether its ledger records close reasons)
-- needs: streams
-- The session key is stored uncompressed: it is scattered over the grouping's output, and
-- DuckDB's string compression (FSST) gained about half its bytes for about a third of the
-- step at 10M events (measured with the payload digest, then stored too; a reader scans
-- it as it is). The other columns compress as DuckDB chooses.
-- A stream's payload digest is not kept: a 64-character hex value of its own, it was about
-- a tenth of the step and of its peak memory at 100M events (read, joined back, written
-- uncompressed), for two readers that need it for the streams of a few sessions
-- (rollback_post_storm, a_blind_streams in 13_blind_spans.sql). They look it up in the
-- ledger as this file took it: a stream's first non-NULL digest by record_order, of every
-- ledger file.
CREATE OR REPLACE TABLE a_streams (
    session_hmac VARCHAR USING COMPRESSION uncompressed,
    generation BIGINT,
    stream_id VARCHAR,
    opened_ts TIMESTAMPTZ,
    last_ts TIMESTAMPTZ,
    request_id VARCHAR,
    method VARCHAR,
    tool_class VARCHAR,
    tool_name VARCHAR,
    last_state VARCHAR,
    disconnected BOOLEAN,
    completed BOOLEAN,
    reasoned BOOLEAN
);

-- A stream's request (id, method, tool) is each column's first non-NULL value (in time,
-- then file and position: record_order). The grouping keeps no request text: arg_min over
-- text held them in its states, which grew x14-16 from 10M to 100M events. It keeps, per
-- stream, the place of its first record and which of the four columns that record has (a
-- bit each) against which any record has: where they agree (a stream whose opening record
-- carries its request: every stream of the simulated fleets) the four are that record's,
-- read by its place (record_order is one number per record); a stream none of whose
-- records names a request has none; only the other streams' records are grouped with the
-- four arg_min, as before.
INSERT INTO a_streams
WITH s AS NOT MATERIALIZED (
    SELECT *, record_order(ts, file_id, pos) AS o,
           (request_id IS NOT NULL)::INTEGER + 2 * (method IS NOT NULL)::INTEGER
           + 4 * (tool_class IS NOT NULL)::INTEGER + 8 * (tool_name IS NOT NULL)::INTEGER AS has
    FROM streams
),
grouped AS MATERIALIZED (
    SELECT session_hmac, generation, stream_id,
           min(ts) AS opened_ts,
           max(ts) AS last_ts,
           min(o) AS first_o,
           arg_min(has, o) AS first_has,
           bit_or(has) AS any_has,
           arg_max(state, o) AS last_state,
           bool_or(state = 'DISCONNECTED') AS disconnected,
           bool_or(is_completed(state, close_reason)) AS completed,
           -- a ledger that records no close reason cannot show a completed stream
           bool_or(close_reason IS NOT NULL) AS reasoned
    FROM s
    GROUP BY ALL
)
-- a stream whose first record has every request column any of its records has
SELECT g.session_hmac, g.generation, g.stream_id, g.opened_ts, g.last_ts,
       f.request_id, f.method, f.tool_class, f.tool_name,
       g.last_state, g.disconnected, g.completed, g.reasoned
FROM grouped g
JOIN s f ON f.o = g.first_o
WHERE g.first_has = g.any_has AND g.any_has <> 0 AND f.has <> 0
UNION ALL
-- a stream none of whose records names its request
SELECT session_hmac, generation, stream_id, opened_ts, last_ts, NULL, NULL, NULL, NULL,
       last_state, disconnected, completed, reasoned
FROM grouped
WHERE any_has = 0
UNION ALL
-- the others (a first record without a value a later one has, or none in order): each
-- column's first non-NULL value
SELECT session_hmac, generation, stream_id,
       min(ts) AS opened_ts,
       max(ts) AS last_ts,
       arg_min(request_id, o) FILTER (WHERE request_id IS NOT NULL) AS request_id,
       arg_min(method, o) FILTER (WHERE method IS NOT NULL) AS method,
       arg_min(tool_class, o) FILTER (WHERE tool_class IS NOT NULL) AS tool_class,
       arg_min(tool_name, o) FILTER (WHERE tool_name IS NOT NULL) AS tool_name,
       arg_max(state, o) AS last_state,
       bool_or(state = 'DISCONNECTED') AS disconnected,
       bool_or(is_completed(state, close_reason)) AS completed,
       bool_or(close_reason IS NOT NULL) AS reasoned
FROM s
SEMI JOIN (SELECT session_hmac, generation, stream_id FROM grouped
           WHERE any_has <> 0 AND first_has IS DISTINCT FROM any_has) x
  ON x.session_hmac IS NOT DISTINCT FROM s.session_hmac
 AND x.generation IS NOT DISTINCT FROM s.generation
 AND x.stream_id IS NOT DISTINCT FROM s.stream_id
GROUP BY ALL;

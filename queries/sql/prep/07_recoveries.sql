-- name: a_recoveries
-- purpose: one row per DISCONNECTED: the first reconnect after it, and the STREAM_OPEN that
--          ended it (if any, before a CLOSED), with the retry the server had recommended
-- needs: streams
-- Only the streams that were disconnected are ordered (about one stream in eight): a
-- window over every stream row, partitioned by three text columns, was most of the step.
-- The session key is stored uncompressed (nearly every disconnect's session is its own:
-- DuckDB's string compression of them was about half of writing the table); the other
-- columns compress as DuckDB chooses.
CREATE OR REPLACE TABLE a_recoveries (
    session_hmac VARCHAR USING COMPRESSION uncompressed,
    generation BIGINT,
    stream_id VARCHAR,
    disc_ts TIMESTAMPTZ,
    close_reason VARCHAR,
    retry_ms BIGINT,
    reconnect_ts TIMESTAMPTZ,
    reopen_ts TIMESTAMPTZ,
    secs DOUBLE
);

INSERT INTO a_recoveries
WITH disconnected AS (
    SELECT DISTINCT session_hmac, generation, stream_id FROM streams
    WHERE state = 'DISCONNECTED'
),
ordered AS (
    SELECT s.session_hmac, s.generation, s.stream_id, s.state, s.ts, s.close_reason,
           last_value(s.retry_ms IGNORE NULLS) OVER (w ROWS UNBOUNDED PRECEDING) AS retry_ms,
           min(CASE WHEN s.state IN ('RESUME_PENDING', 'STREAM_OPEN') THEN s.ts END)
               OVER (w ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS reconnect_ts,
           min(CASE WHEN s.state = 'STREAM_OPEN' THEN s.ts END)
               OVER (w ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS open_ts,
           min(CASE WHEN s.state = 'CLOSED' THEN s.ts END)
               OVER (w ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS closed_ts
    FROM streams s
    SEMI JOIN disconnected d
      ON s.session_hmac IS NOT DISTINCT FROM d.session_hmac
     AND s.generation IS NOT DISTINCT FROM d.generation
     AND s.stream_id IS NOT DISTINCT FROM d.stream_id
    WINDOW w AS (PARTITION BY s.session_hmac, s.generation, s.stream_id
                 ORDER BY s.ts, s.file_id, s.pos)
)
SELECT session_hmac, generation, stream_id, ts AS disc_ts, close_reason, retry_ms,
       reconnect_ts,
       CASE WHEN closed_ts IS NULL OR open_ts <= closed_ts THEN open_ts END AS reopen_ts,
       (epoch_ms(CASE WHEN closed_ts IS NULL OR open_ts <= closed_ts THEN open_ts END)
        - epoch_ms(ts)) / 1000.0 AS secs
FROM ordered
WHERE state = 'DISCONNECTED';

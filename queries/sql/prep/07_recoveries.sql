-- name: a_recoveries
-- purpose: one row per DISCONNECTED: the first reconnect after it, and the STREAM_OPEN that
--          ended it (if any, before a CLOSED), with the retry the server had recommended
-- needs: streams
CREATE OR REPLACE TABLE a_recoveries AS
WITH ordered AS (
    SELECT session_hmac, generation, stream_id, state, ts, close_reason,
           last_value(retry_ms IGNORE NULLS) OVER (w ROWS UNBOUNDED PRECEDING) AS retry_ms,
           min(CASE WHEN state IN ('RESUME_PENDING', 'STREAM_OPEN') THEN ts END)
               OVER (w ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS reconnect_ts,
           min(CASE WHEN state = 'STREAM_OPEN' THEN ts END)
               OVER (w ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS open_ts,
           min(CASE WHEN state = 'CLOSED' THEN ts END)
               OVER (w ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS closed_ts
    FROM streams
    WINDOW w AS (PARTITION BY session_hmac, generation, stream_id ORDER BY ts, file_id, pos)
)
SELECT session_hmac, generation, stream_id, ts AS disc_ts, close_reason, retry_ms,
       reconnect_ts,
       CASE WHEN closed_ts IS NULL OR open_ts <= closed_ts THEN open_ts END AS reopen_ts,
       (epoch_ms(CASE WHEN closed_ts IS NULL OR open_ts <= closed_ts THEN open_ts END)
        - epoch_ms(ts)) / 1000.0 AS secs
FROM ordered
WHERE state = 'DISCONNECTED';

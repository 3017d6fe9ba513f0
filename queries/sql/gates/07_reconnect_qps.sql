-- name: reconnect_qps
-- title: Reconnect rate
-- kind: peak
-- detectors: reconnect_storm
-- min_sample: 0
-- sample: reconnects
-- unit: reconnects/s
-- measure: peak reconnects per second over 10-second windows (GET with Last-Event-ID, cursor-less GET re-opens on a session, 429, 503); sample: reconnects
WITH buckets AS (
    SELECT stage, epoch_ms(ts) // 10000 AS bucket, count(*) AS n
    FROM (SELECT *, prior_gets(method, stage || session_hmac, ts) AS gets_before
          FROM a_proxy_staged)
    WHERE is_reconnect(method, last_event_id, status, gets_before)
    GROUP BY ALL
)
SELECT w.stage, coalesce(max(b.n) / 10.0, 0) AS value, coalesce(sum(b.n), 0) AS sample
FROM a_stages w LEFT JOIN buckets b USING (stage)
GROUP BY w.stage

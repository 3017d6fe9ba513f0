-- name: reconnect_qps
-- title: Reconnect rate
-- page: sessions
-- kind: peak
-- detectors: reconnect_storm
-- min_sample: 0
-- sample: reconnects
-- unit: reconnects/s
-- measure: peak reconnects per second over 10-second windows (GET with Last-Event-ID, cursor-less GET re-opens on a session, 429, 503); sample: reconnects
-- params: by_stage, flt
WITH windows AS (
    SELECT k, reconnect_window(ts) AS win,
           count(*) FILTER (WHERE fact = 'proxy_records' AND reconnect) AS n
    FROM gate_rows($by_stage, $flt) GROUP BY ALL
)
SELECT k AS stage, coalesce(max(n) / reconnect_window_s(), 0) AS value, coalesce(sum(n), 0) AS sample
FROM windows GROUP BY k

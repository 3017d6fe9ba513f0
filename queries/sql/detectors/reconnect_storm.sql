-- name: reconnect_storm
-- invariant: reconnects (GET with Last-Event-ID, a GET re-opening a session's stream without one, requests answered 429 or 503) stay within the budget in every 10-second window
-- failure: After an outage every client reconnects at once (ignoring retry and Retry-After),
--   and 429/503 answers feed more reconnects.
-- dashboard: Sessions & proxy: the reconnect chart crosses the budget line; Overview: the
--   `reconnect_qps` gate fails; a `high` row per 10-second window.
-- fix: Honour `retry` and Retry-After with jitter and a global reconnect budget on the client;
--   shed load with 503 and Retry-After on the server.
-- severity: high
-- needs: proxy
-- facts: proxy.last_event_id
-- units: proxy WHERE method = 'GET' OR status IN (429, 503) BY reconnect_window(ts)
-- params: reconnect_budget_qps
-- unit: 10-second window
-- page: sessions
SELECT 'high' AS severity, reconnect_window_start(bucket) AS ts,
       json_object('reconnects', count(*),
                   'budget_per_window', $reconnect_budget_qps * reconnect_window_s(),
                   'qps', count(*) / reconnect_window_s(),
                   'by_status', histogram(status)) AS detail
FROM (
    SELECT *, reconnect_window(ts) AS bucket
    FROM (SELECT *, prior_gets(method, session_hmac, ts, file_id, pos) AS gets_before FROM proxy)
    WHERE is_reconnect(method, last_event_id, status, gets_before)
)
GROUP BY bucket
HAVING count(*) > $reconnect_budget_qps * reconnect_window_s()

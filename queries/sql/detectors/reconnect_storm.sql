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
-- facts: none
-- undecided: Last-Event-ID
-- units: proxy WHERE method = 'GET' OR status IN (429, 503) BY reconnect_window(ts)
-- params: reconnect_budget_qps
-- unit: 10-second window
-- page: sessions
-- A proxy log that cannot show Last-Event-ID (file_facts) is judged for what it shows: its
-- 429/503 answers and its GETs re-opening a session's stream count as in any log. Only its
-- other GETs (a session's first, one without a session: cursor_unseen) may have carried a
-- cursor: a window over the budget with them and within it without them
-- (reconnect_undecided, the rule the reconnect_qps gate applies to a stage's windows) is
-- `cannot_tell`, naming the first such log by path; a window over the budget without them
-- (reconnect_over_budget) is a finding.
-- A GET re-opens its session's stream when it comes after the session's first GET
-- (reopens in macros.sql), found among the GETs alone (a few in a hundred requests).
WITH first_gets AS (
    SELECT session_hmac, first_get(ts, file_id, pos) AS first_get
    FROM proxy WHERE method = 'GET' AND session_hmac IS NOT NULL
    GROUP BY session_hmac
),
r AS (
    SELECT reconnect_window(p.ts) AS bucket, p.file_id, p.status, p.method,
           coalesce(is_reconnect(p.method, p.last_event_id, p.status,
                                 reopens(p.method, p.ts, p.file_id, p.pos, g.first_get)),
                    false) AS known
    FROM proxy p
    LEFT JOIN first_gets g ON p.method = 'GET' AND g.session_hmac = p.session_hmac
),
counted AS (
    SELECT bucket, count(*) AS n, histogram(status) AS by_status
    FROM r
    WHERE known
    GROUP BY bucket
),
-- per window, the GETs of logs that cannot show Last-Event-ID not shown to be reconnects
open_gets AS (
    SELECT r.bucket, count(*) AS maybe, arg_min(r.file_id, f.path) AS file_id
    FROM r JOIN files f USING (file_id)
    WHERE cursor_unseen(r.method, r.known, r.file_id IN (
              SELECT file_id FROM file_facts WHERE fact = 'proxy.last_event_id'))
    GROUP BY r.bucket
)
SELECT 'high' AS severity, reconnect_window_start(bucket) AS ts,
       json_object('reconnects', n,
                   'budget_per_window', $reconnect_budget_qps * reconnect_window_s(),
                   'qps', n / reconnect_window_s(),
                   'by_status', by_status) AS detail
FROM counted
WHERE reconnect_over_budget(n, $reconnect_budget_qps)
UNION ALL
SELECT 'cannot_tell' AS severity, reconnect_window_start(o.bucket) AS ts,
       json_object('missing', 'Last-Event-ID', 'file_id', o.file_id,
                   'reconnects', coalesce(c.n, 0),
                   'budget_per_window', $reconnect_budget_qps * reconnect_window_s(),
                   'gets_cursor_unknown', o.maybe) AS detail
FROM open_gets o LEFT JOIN counted c USING (bucket)
WHERE reconnect_undecided(coalesce(c.n, 0), o.maybe, $reconnect_budget_qps)

-- name: reconnect_qps
-- title: Reconnect rate
-- page: sessions
-- kind: peak
-- detectors: reconnect_storm
-- min_sample: 0
-- sample: reconnects
-- unit: reconnects/s
-- measure: peak reconnects per second over 10-second windows (GET with Last-Event-ID, cursor-less GET re-opens on a session, 429, 503); sample: reconnects; a window within the budget by what the logs show that the GETs of a log without Last-Event-ID could put over it makes the stage insufficient
-- params: by_stage, flt, reconnect_budget_qps
-- A proxy log that cannot show Last-Event-ID may hide reconnects among its other GETs
-- (cursor_unseen). A stage with a window within the budget by the reconnects shown and over
-- it with those (reconnect_undecided: the rule by which reconnect_storm returns a window
-- `cannot_tell`) cannot pass: `insufficient` says how many windows and names the first
-- such log by path. A window over the budget by what is shown fails whatever the others.
WITH counted AS (
    SELECT g.k, g.ts, g.fact, g.reconnect, f.path,
           g.fact = 'proxy_records'
           AND cursor_unseen(g.method, g.reconnect, g.file_id IN (
               SELECT ff.file_id FROM file_facts ff WHERE ff.fact = 'proxy.last_event_id'))
               AS unseen
    FROM gate_rows($by_stage, $flt) g LEFT JOIN files f ON f.file_id = g.file_id
),
windows AS (
    SELECT k, reconnect_window(ts) AS win,
           count(*) FILTER (WHERE fact = 'proxy_records' AND reconnect) AS n,
           count(*) FILTER (WHERE unseen) AS unseen, min(path) FILTER (WHERE unseen) AS path
    FROM counted GROUP BY ALL
),
judged AS (
    SELECT k, max(n) AS peak, sum(n) AS n,
           count(*) FILTER (WHERE reconnect_undecided(n, unseen, $reconnect_budget_qps))
               AS undecided,
           min(path) FILTER (WHERE reconnect_undecided(n, unseen, $reconnect_budget_qps))
               AS path
    FROM windows GROUP BY k
)
SELECT k AS stage, coalesce(peak / reconnect_window_s(), 0) AS value,
       coalesce(n, 0) AS sample,
       CASE WHEN undecided > 0 THEN
           format('{} {} within the budget by the reconnects shown could be over it ({} '
                  || 'cannot show Last-Event-ID)', undecided,
                  CASE WHEN undecided = 1 THEN 'window' ELSE 'windows' END, path)
       END AS insufficient
FROM judged

-- name: reinit_after_404
-- title: Re-initialize after 404
-- kind: share
-- detectors: reinit_missing
-- min_sample: 0
-- sample: 404s on a session
-- unit: 404s not followed by a re-initialize
-- unit_one: 404 not followed by a re-initialize
-- params: detectors, dead_statuses
-- measure: share of dead-session answers (`dead_session_statuses`, default 404) on a session (not DELETE) followed by a re-initialize; sample: those answers
WITH gone AS (
    SELECT stage, count(*) AS n FROM a_proxy_staged
    WHERE dead_session(status, session_hmac, method, $dead_statuses)
      -- only the 404s its detector could judge (not those of a log that cannot show an
      -- initialize: they are `cannot_tell`)
      AND file_id NOT IN (SELECT file_id FROM blind_files
                           WHERE list_contains($detectors, detector))
    GROUP BY stage
),
bad AS (
    SELECT stage, count(*) AS n FROM findings WHERE list_contains($detectors, detector) GROUP BY stage
)
SELECT w.stage,
       CASE WHEN coalesce(g.n, 0) = 0 THEN NULL
            ELSE (g.n - coalesce(b.n, 0)) / g.n END AS value,
       coalesce(g.n, 0) AS sample,
       coalesce(b.n, 0) AS failures
FROM a_stages w LEFT JOIN gone g USING (stage) LEFT JOIN bad b USING (stage)

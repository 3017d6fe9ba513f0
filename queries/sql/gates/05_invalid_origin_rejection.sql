-- name: invalid_origin_rejection
-- title: Invalid Origins refused
-- kind: share
-- detectors: invalid_origin_accepted
-- min_sample: 0
-- sample: invalid-Origin requests
-- unit: invalid-Origin requests served
-- unit_one: invalid-Origin request served
-- measure: share of requests with an Origin outside the allow-list answered 403; sample: those requests
-- params: origin_patterns
WITH invalid AS (
    SELECT stage, count(*) AS n, count(*) FILTER (WHERE status <> 403) AS accepted
    FROM a_proxy_staged
    WHERE origin IS NOT NULL
      AND NOT origin_allowed(origin, $origin_patterns)
    GROUP BY stage
)
SELECT w.stage,
       CASE WHEN coalesce(i.n, 0) = 0 THEN NULL ELSE (i.n - i.accepted) / i.n END AS value,
       coalesce(i.n, 0) AS sample,
       coalesce(i.accepted, 0) AS failures
FROM a_stages w LEFT JOIN invalid i USING (stage)

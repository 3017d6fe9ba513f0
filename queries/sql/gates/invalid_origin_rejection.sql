-- name: invalid_origin_rejection
-- measure: share of requests with an Origin outside the allow-list answered 403; sample: those requests
-- params: origin_patterns
WITH invalid AS (
    SELECT stage, count(*) AS n, count(*) FILTER (WHERE status <> 403) AS accepted
    FROM a_proxy_staged
    WHERE origin IS NOT NULL
      AND len(list_filter($origin_patterns, lambda p: like_escape(origin, p, '\'))) = 0
    GROUP BY stage
)
SELECT w.stage,
       CASE WHEN coalesce(i.n, 0) = 0 THEN NULL ELSE (i.n - i.accepted) / i.n END AS value,
       coalesce(i.n, 0) AS sample,
       coalesce(i.accepted, 0) AS failures
FROM a_stages w LEFT JOIN invalid i USING (stage)

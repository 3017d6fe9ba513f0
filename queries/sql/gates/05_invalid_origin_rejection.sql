-- name: invalid_origin_rejection
-- title: Invalid Origins refused
-- kind: share
-- detectors: invalid_origin_accepted
-- min_sample: 0
-- sample: invalid-Origin requests
-- unit: invalid-Origin requests served
-- unit_one: invalid-Origin request served
-- measure: share of MCP requests with an Origin outside the allow-list that were refused (any 4xx); sample: those refused or served (not OPTIONS, not 5xx)
-- params: origin_patterns, origin_configured
-- With no allow-list configured, a stage that saw a foreign Origin cannot be judged:
-- `insufficient` names why (queries/gates.py), never a pass nor a fail.
WITH invalid AS (
    SELECT stage,
           count(*) FILTER (WHERE origin_invalid(origin, $origin_patterns, $origin_configured)
                              AND (is_served(status) OR is_refused(status))) AS n,
           count(*) FILTER (WHERE origin_invalid(origin, $origin_patterns, $origin_configured)
                              AND is_served(status)) AS accepted,
           count(*) FILTER (WHERE origin_unjudged(origin, $origin_patterns, $origin_configured))
               AS unjudged
    FROM a_proxy_staged
    WHERE origin IS NOT NULL AND is_mcp_request(method)
    GROUP BY stage
)
SELECT w.stage,
       CASE WHEN coalesce(i.n, 0) = 0 THEN NULL ELSE (i.n - i.accepted) / i.n END AS value,
       coalesce(i.n, 0) AS sample,
       coalesce(i.accepted, 0) AS failures,
       CASE WHEN coalesce(i.unjudged, 0) > 0 THEN 'origin allow-list not configured' END
           AS insufficient
FROM a_stages w LEFT JOIN invalid i USING (stage)

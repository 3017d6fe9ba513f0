-- name: invalid_origin_rejection
-- title: Invalid Origins refused
-- page: sessions
-- kind: share
-- detectors: invalid_origin_accepted
-- min_sample: 0
-- sample: invalid-Origin requests
-- unit: invalid-Origin requests served
-- unit_one: invalid-Origin request served
-- measure: share of MCP requests with an Origin outside the allow-list that were refused (any 4xx); sample: those refused or served (not OPTIONS, not 5xx)
-- params: by_stage, flt, origin_patterns, origin_configured
-- With no allow-list configured, a stage that saw a foreign Origin cannot be judged:
-- `insufficient` names why (queries/gates.py), never a pass nor a fail.
WITH m AS (
    SELECT k,
           count(*) FILTER (WHERE origin_invalid(origin, $origin_patterns, $origin_configured)
                              AND (is_served(status) OR is_refused(status))) AS n,
           count(*) FILTER (WHERE origin_invalid(origin, $origin_patterns, $origin_configured)
                              AND is_served(status)) AS accepted,
           count(*) FILTER (WHERE origin_unjudged(origin, $origin_patterns, $origin_configured))
               AS unjudged
    FROM gate_rows($by_stage, $flt)
    WHERE fact = 'none' OR (fact = 'proxy_records' AND is_mcp_request(method))
    GROUP BY k
)
SELECT k AS stage, CASE WHEN n = 0 THEN NULL ELSE (n - accepted) / n END AS value,
       n AS sample, accepted AS failures,
       CASE WHEN unjudged > 0 THEN 'origin allow-list not configured' END AS insufficient
FROM m

-- name: allowed_origin_refusals
-- title: Allowed Origins served
-- kind: count
-- detectors: allowed_origin_refused
-- min_sample: 0
-- sample: requests with an allowed or no Origin
-- unit: allowed-Origin requests refused
-- unit_one: allowed-Origin request refused
-- measure: count of allowed_origin_refused findings; sample: MCP requests whose Origin is on the allow-list or absent
-- params: detectors, origin_patterns
WITH ok AS (
    SELECT stage, count(*) AS n FROM a_proxy_staged
    WHERE is_mcp_request(method) AND origin_ok(origin, $origin_patterns)
    GROUP BY stage
)
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage AND list_contains($detectors, f.detector)) AS value,
       coalesce(o.n, 0) AS sample
FROM a_stages w LEFT JOIN ok o USING (stage)

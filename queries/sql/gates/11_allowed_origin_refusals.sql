-- name: allowed_origin_refusals
-- title: Allowed Origins served
-- kind: count
-- detectors: allowed_origin_refused
-- min_sample: 0
-- sample: requests with an allowed or no Origin
-- unit: allowed-Origin requests refused
-- unit_one: allowed-Origin request refused
-- measure: count of allowed_origin_refused findings; sample: MCP requests whose Origin is on the allow-list or absent
-- params: by_stage, flt, detectors, origin_patterns
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = 'proxy_records' AND is_mcp_request(method)
                          AND origin_ok(origin, $origin_patterns)) AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

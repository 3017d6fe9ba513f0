-- name: allowed_origin_refusals
-- title: Allowed Origins served
-- kind: count
-- detectors: allowed_origin_refused
-- min_sample: 0
-- sample: requests with an allowed or no Origin
-- unit: allowed-Origin requests refused
-- unit_one: allowed-Origin request refused
-- measure: count of allowed_origin_refused findings; sample: MCP requests whose Origin is on the allow-list or absent, in the logs its detector could judge (not a log that cannot show Origin)
-- params: by_stage, flt, detectors, origin_patterns
-- A log that cannot show Origin is left out of the detector's input (its refusals may
-- have turned away a foreign Origin): its requests read as having none, and are no
-- passing requests, whether or not another log shows Origin (judged_file in
-- gate_facts.sql).
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = 'proxy_records' AND is_mcp_request(method)
                          AND origin_ok(origin, $origin_patterns)
                          AND judged_file(file_id, $detectors))
           AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

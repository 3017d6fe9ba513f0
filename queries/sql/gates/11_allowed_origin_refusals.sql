-- name: allowed_origin_refusals
-- title: Allowed Origins served
-- kind: count
-- detectors: allowed_origin_refused
-- min_sample: 0
-- sample: requests with an allowed or no Origin
-- unit: allowed-Origin requests refused
-- unit_one: allowed-Origin request refused
-- measure: count of allowed_origin_refused findings; sample: MCP requests whose Origin is on the allow-list or absent, in the logs its detector could judge (not a log that cannot show Origin while another does)
-- params: by_stage, flt, detectors, origin_patterns
-- A log that cannot show Origin while another does is left out of the detector's input
-- (its refusals may have turned away a foreign Origin): its requests read as having none,
-- and are no passing requests. (Where no log shows Origin, the detector judges nothing:
-- the whole source's case, said by its coverage.)
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = 'proxy_records' AND is_mcp_request(method)
                          AND origin_ok(origin, $origin_patterns)
                          AND file_id NOT IN (
                              SELECT file_id FROM blind_files
                              WHERE list_contains($detectors, detector)
                                AND detector NOT IN (SELECT detector FROM coverage
                                                     WHERE status = 'cannot tell')))
           AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

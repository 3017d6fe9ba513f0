-- name: recovery_p99
-- title: Recovery time p99
-- page: streams
-- kind: p99
-- detectors: slow_recovery
-- scopes: read, write
-- replay: true
-- min_sample: 20
-- sample: recoveries
-- unit: seconds
-- meter: recoveries
-- params: by_stage, flt, meter
-- measure: p99 of DISCONNECTED -> STREAM_OPEN seconds; sample: recoveries
SELECT k AS stage, quantile_cont(secs, 0.99) FILTER (WHERE fact = $meter) AS value,
       count(*) FILTER (WHERE fact = $meter) AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

-- name: write_idempotency
-- title: Write idempotency
-- page: dispatch
-- kind: count
-- detectors: missing_idempotency_key
-- scopes: write
-- min_sample: 1
-- sample: write dispatches
-- unit: writes executed without an idempotency key
-- unit_one: write executed without an idempotency key
-- meter: write_dispatches
-- params: by_stage, flt, detectors, meter
-- measure: count of missing_idempotency_key findings; sample: write and paid dispatches
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = $meter) AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

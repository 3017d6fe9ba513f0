-- name: write_idempotency
-- title: Write idempotency
-- kind: count
-- detectors: missing_idempotency_key
-- scopes: write
-- min_sample: 1
-- sample: write dispatches
-- unit: writes executed without an idempotency key
-- unit_one: write executed without an idempotency key
-- meter: write_dispatches
-- params: detectors, meter
-- measure: count of missing_idempotency_key findings; sample: write and paid dispatches
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage AND list_contains($detectors, f.detector)) AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = $meter AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

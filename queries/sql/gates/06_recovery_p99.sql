-- name: recovery_p99
-- title: Recovery time p99
-- kind: p99
-- detectors: slow_recovery
-- scopes: read, write
-- replay: true
-- min_sample: 20
-- sample: recoveries
-- unit: seconds
-- meter: recoveries
-- params: meter
-- measure: p99 of DISCONNECTED -> STREAM_OPEN seconds; sample: recoveries
SELECT w.stage, s.p99 AS value, coalesce(s.n, 0) AS sample
FROM a_stages w
LEFT JOIN a_stage_samples s
  ON s.stage = w.stage AND s.sample = $meter AND s.revision IS NULL

-- name: recovery_p99
-- measure: p99 of DISCONNECTED -> STREAM_OPEN seconds; sample: recoveries
SELECT w.stage, s.p99 AS value, coalesce(s.n, 0) AS sample
FROM a_stages w
LEFT JOIN a_stage_samples s
  ON s.stage = w.stage AND s.sample = 'recoveries' AND s.revision IS NULL

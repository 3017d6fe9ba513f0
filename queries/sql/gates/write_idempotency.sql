-- name: write_idempotency
-- measure: count of missing_idempotency_key findings; sample: write and paid dispatches
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage AND f.detector = 'missing_idempotency_key') AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = 'write_dispatches' AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

-- name: cross_stream_acceptances
-- measure: count of cross_stream_acceptance findings; sample: accepted receipts
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage AND f.detector = 'cross_stream_acceptance') AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = 'accepted_receipts' AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

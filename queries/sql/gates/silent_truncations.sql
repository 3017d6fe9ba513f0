-- name: silent_truncations
-- measure: count of silent_truncation and dropped_terminal findings; sample: completed streams
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage
           AND f.detector IN ('silent_truncation', 'dropped_terminal')) AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = 'completed_streams' AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

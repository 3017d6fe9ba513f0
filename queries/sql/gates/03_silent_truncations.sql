-- name: silent_truncations
-- title: Silent truncations
-- kind: count
-- detectors: silent_truncation, dropped_terminal
-- replay: true
-- min_sample: 1
-- sample: completed streams
-- unit: answers closed incomplete or without their result
-- unit_one: answer closed incomplete or without its result
-- meter: completed_streams
-- params: detectors, meter
-- measure: count of silent_truncation and dropped_terminal findings; sample: completed streams
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage
           AND list_contains($detectors, f.detector)) AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = $meter AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

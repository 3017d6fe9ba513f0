-- name: duplicate_dispatches
-- title: Duplicate dispatches
-- kind: count
-- detectors: duplicate_dispatch
-- min_sample: 0
-- sample: write dispatches
-- unit: duplicate business dispatches
-- unit_one: duplicate business dispatch
-- meter: write_dispatches
-- params: detectors, meter
-- measure: count of duplicate_dispatch findings; sample: write dispatches
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage AND list_contains($detectors, f.detector)
           AND gated(f.detail)) AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = $meter AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

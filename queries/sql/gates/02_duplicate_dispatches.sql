-- name: duplicate_dispatches
-- title: Duplicate dispatches
-- page: dispatch
-- kind: count
-- detectors: duplicate_dispatch
-- min_sample: 0
-- sample: write dispatches
-- unit: duplicate business dispatches
-- unit_one: duplicate business dispatch
-- meter: write_dispatches
-- params: by_stage, flt, detectors, meter
-- measure: count of duplicate_dispatch findings; sample: write dispatches
-- (a suspected duplicate is no gate fact: gated() in macros.sql)
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = $meter) AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

-- name: silent_truncations
-- title: Silent truncations
-- page: streams
-- kind: count
-- detectors: silent_truncation, dropped_terminal
-- replay: true
-- min_sample: 1
-- sample: completed streams
-- unit: answers closed incomplete or without their result
-- unit_one: answer closed incomplete or without its result
-- meter: completed_streams
-- params: by_stage, flt, detectors, meter
-- measure: count of silent_truncation and dropped_terminal findings; sample: completed streams
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = $meter) AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

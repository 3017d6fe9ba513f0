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
-- params: by_stage, flt, detectors, probe_detectors, meter
-- measure: count of duplicate_dispatch findings; sample: write dispatches its detector could judge (not the writes of a dispatch file that records no payload digest while another does, nor an executed write whose key or re-send may be one of them)
-- (a suspected duplicate is no gate fact: gated() in macros.sql)
-- The writes its detector could not judge are no passing writes, so a stage (or a
-- filtered view) whose every write is such is insufficient, never a pass: those of a
-- dispatch file it was kept from (one that records no payload digest while another
-- does) are left out, and those it returned `cannot_tell` ("same payload",
-- undecided_units in gate_facts.sql: under a filter, those the filter keeps) subtracted.
WITH m AS (
    SELECT k, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
           count(*) FILTER (WHERE fact = $meter
                              AND judged_file(file_id, $detectors))
               AS n
    FROM gate_rows($by_stage, $flt) GROUP BY k
)
SELECT m.k AS stage, m.value, greatest(m.n - coalesce(u.n, 0), 0) AS sample
FROM m LEFT JOIN undecided_units($by_stage, $flt, $detectors, $probe_detectors) u
  ON u.k IS NOT DISTINCT FROM m.k

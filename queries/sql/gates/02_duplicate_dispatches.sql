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
-- measure: count of duplicate_dispatch findings; sample: write dispatches its detector could judge (not the executed writes it cannot tell: those of a dispatch file that records no payload digest while another does, and a write whose key or re-send may be one of them)
-- (a suspected duplicate is no gate fact: gated() in macros.sql)
-- The executed writes its detector returned `cannot_tell` in the stage (its units of a
-- file that records no payload digest, "same payload") are no passing writes: they are
-- left out of the sample, so a stage whose every write is such is insufficient, never a
-- pass. (Under a dashboard filter: those of the filter's stage; with no stage, none.)
WITH m AS (
    SELECT k, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
           count(*) FILTER (WHERE fact = $meter) AS n
    FROM gate_rows($by_stage, $flt) GROUP BY k
),
undecided AS (
    SELECT CASE WHEN $by_stage THEN stage END AS k, sum(units) AS n FROM cannot_tell_stages
    WHERE ($by_stage OR stage = $flt.stage::VARCHAR) AND list_contains($detectors, detector)
    GROUP BY ALL
)
SELECT m.k AS stage, m.value, greatest(m.n - coalesce(u.n, 0), 0) AS sample
FROM m LEFT JOIN undecided u ON u.k IS NOT DISTINCT FROM m.k

-- name: cross_stream_acceptances
-- title: Cross-stream acceptances
-- kind: count
-- detectors: cross_stream_acceptance
-- replay: true
-- min_sample: 100000
-- sample: accepted receipts
-- unit: accepted events from another stream
-- unit_one: accepted event from another stream
-- meter: accepted_receipts
-- params: detectors, meter
-- measure: count of cross_stream_acceptance findings; sample: accepted receipts
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage AND list_contains($detectors, f.detector)) AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = $meter AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

-- name: cross_stream_acceptances
-- title: Cross-stream acceptances
-- kind: count
-- detectors: cross_stream_acceptance
-- replay: true
-- min_sample: 100000
-- sample: delivered events
-- unit: accepted events from another stream
-- unit_one: accepted event from another stream
-- meter: delivered_events
-- params: detectors, meter
-- measure: count of cross_stream_acceptance findings; sample: delivered events (accepted
--          receipts where the client keeps an inbox, else the events the server's log shows
--          it sent or replayed: what the server-based detector judges)
SELECT w.stage,
       (SELECT count(*) FROM findings f
         WHERE f.stage = w.stage AND list_contains($detectors, f.detector)) AS value,
       coalesce((SELECT n FROM a_stage_samples s
                  WHERE s.stage = w.stage AND s.sample = $meter AND s.revision IS NULL), 0)
           AS sample
FROM a_stages w

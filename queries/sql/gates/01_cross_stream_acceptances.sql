-- name: cross_stream_acceptances
-- title: Cross-stream acceptances
-- page: streams
-- kind: count
-- detectors: cross_stream_acceptance
-- replay: true
-- min_sample: 100000
-- sample: delivered events
-- unit: accepted events from another stream
-- unit_one: accepted event from another stream
-- meter: delivered_events
-- params: by_stage, flt, detectors, meter
-- measure: count of cross_stream_acceptance findings; sample: delivered events (accepted
--          receipts where the client keeps an inbox, else the events the server's log shows
--          it sent or replayed: what the server-based detector judges)
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = $meter) AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

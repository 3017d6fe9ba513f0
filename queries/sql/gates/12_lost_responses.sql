-- name: lost_responses
-- title: Answers delivered
-- kind: count
-- detectors: undelivered_result
-- min_sample: 1
-- sample: completed streams and event-stream answers a proxy row judges
-- unit: answers produced and never delivered
-- unit_one: answer produced and never delivered
-- meter: completed_streams
-- page: streams
-- params: by_stage, flt, detectors, meter
-- measure: count of undelivered_result findings; sample: completed streams, and POSTs answered with an event stream a proxy row judges (its body size logged: bytes, or none and the client did not end the request)
-- A stage none of whose sources can show delivery (no event log, a proxy log without the
-- answer's size or type, or whose empty answers it cannot tell from a client that hung up)
-- has sample 0: insufficient, never a pass.
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = $meter OR fact = 'sized_answers') AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

-- name: cross_stream_acceptance
-- invariant: a client accepts an event only on the stream the event belongs to
-- failure: A resume replays an event of another stream (event ids are only unique per stream,
--   or a shared store is keyed by session alone) and the client accepts it as part of the wrong
--   request.
-- dashboard: Overview: the `cross_stream_acceptances` gate fails; Streams & replay lists a
--   `critical` row per receipt with the event id; the inspector shows the foreign event on the
--   carrying stream.
-- fix: Key replay stores by (session, stream, event id); clients check that a replayed event
--   belongs to the stream they resumed and reject it otherwise.
-- severity: critical
-- needs: inbox|events
-- facts: none
-- unit: receipt (session_hmac, generation, stream_id, event_id)
-- page: streams
-- Basis `client`: an accepted receipt whose origin stream is another. Basis `server`
-- (sessions without receipts): the server replayed on a stream an event another stream
-- produced — nothing on the client's side would have refused it.
SELECT session_hmac, generation, stream_id, event_id, 'critical' AS severity, min(ts) AS ts,
       json_object('basis', 'client', 'origin_stream_id', min(origin_stream_id),
                   'origin_seq', min(seq)) AS detail
FROM a_inbox
WHERE verdict = 'accepted' AND origin_stream_id IS NOT NULL AND origin_stream_id <> stream_id
GROUP BY session_hmac, generation, stream_id, event_id
UNION ALL
-- The event's own stream is the event index's (03_event_index.sql): an event id logged once
-- is its own row there, the replayed row itself, on its own stream; one logged more than
-- once is in a_event_repeats, and its rows, the replayed ones among them, in
-- a_event_repeat_rows (a replayed row on another stream than its id's is always one of
-- those: 22,591 of 47,562 rows at 10M events). Reading them there, not the events, spares
-- a scan of every event's disposition (x13-17 from 10M to 100M, read cold); a join with
-- the whole index built its hash table of every event (x70).
SELECT r.session_hmac, r.generation, r.stream_id, r.event_id, 'critical', min(r.ts),
       json_object('basis', 'server', 'origin_stream_id', min(e.stream_id),
                   'origin_seq', min(e.seq))
FROM a_event_repeat_rows r
JOIN a_event_repeats e USING (session_hmac, generation, event_id)
ANTI JOIN a_inbox_sessions s USING (session_hmac, generation)
WHERE r.disposition = 'replayed' AND e.stream_id <> r.stream_id
GROUP BY r.session_hmac, r.generation, r.stream_id, r.event_id

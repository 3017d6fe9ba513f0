-- name: replay_after_ack
-- invariant: a resume replays only events after the client's acknowledged position (the later of the last acknowledged event the stream recorded and the resume cursor)
-- failure: A server replays from its own bookmark instead of the client's cursor, re-sending
--   events the client had already acknowledged.
-- dashboard: Streams & replay: a `low` row per stream with the replayed seqs and the
--   acknowledged seq.
-- fix: Replay strictly after the presented Last-Event-ID; clients deduplicate replays anyway.
-- severity: low
-- needs: streams, events
-- facts: streams.last_acked_event_id|streams.resume_from_event_id
-- units: streams WHERE state = 'RESUME_PENDING' BY session_hmac, generation, stream_id
-- unit: stream
-- page: streams
-- The acknowledged position at a resume is defined once, in a_resumes (prep).
WITH resumes AS (
    SELECT session_hmac, generation, stream_id, ts, acked_seq
    FROM a_resumes WHERE acked_seq IS NOT NULL
),
replays AS (
    -- the stream's own events only: an event of another stream replayed here is a
    -- cross-stream replay, and its seq counts on its own stream. Its stream is the event
    -- index's (03_event_index.sql): an event id logged once is its own row there, one
    -- logged more than once is in a_event_repeats, looked up for the few replayed rows
    -- (a join with the whole index built a hash table of every event).
    SELECT p.session_hmac, p.generation, p.stream_id, p.ts, p.seq, p.event_id
    FROM events p
    LEFT JOIN a_event_repeats x USING (session_hmac, generation, event_id)
    WHERE p.disposition = 'replayed'
      AND p.session_hmac IS NOT NULL AND p.generation IS NOT NULL AND p.event_id IS NOT NULL
      AND (x.event_id IS NULL OR x.stream_id = p.stream_id)
)
SELECT p.session_hmac, p.generation, p.stream_id, 'low' AS severity, min(p.ts) AS ts,
       json_object('replayed_seqs', list(DISTINCT p.seq ORDER BY p.seq), 'acked_seq', max(r.acked_seq))
           AS detail
FROM replays p
ASOF JOIN resumes r
  ON p.session_hmac = r.session_hmac AND p.generation = r.generation
 AND p.stream_id = r.stream_id AND p.ts >= r.ts
WHERE p.seq <= r.acked_seq
GROUP BY p.session_hmac, p.generation, p.stream_id

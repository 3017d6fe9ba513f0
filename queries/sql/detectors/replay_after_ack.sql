-- name: replay_after_ack
-- invariant: a resume replays only events after the client's acknowledged cursor
-- severity: low
-- needs: streams, events
-- unit: stream
WITH resumes AS (
    SELECT r.session_hmac, r.generation, r.stream_id, r.ts, a.seq AS acked_seq
    FROM streams r
    JOIN a_event_index a
      ON a.session_hmac = r.session_hmac AND a.generation = r.generation
     AND a.event_id = r.last_acked_event_id
    WHERE r.state = 'RESUME_PENDING'
),
replays AS (
    SELECT session_hmac, generation, stream_id, ts, seq, event_id
    FROM events WHERE disposition = 'replayed'
)
SELECT p.session_hmac, p.generation, p.stream_id, 'low' AS severity, min(p.ts) AS ts,
       json_object('replayed_seqs', list(DISTINCT p.seq), 'acked_seq', max(r.acked_seq))
           AS detail
FROM replays p
ASOF JOIN resumes r
  ON p.session_hmac = r.session_hmac AND p.generation = r.generation
 AND p.stream_id = r.stream_id AND p.ts >= r.ts
WHERE p.seq <= r.acked_seq
GROUP BY p.session_hmac, p.generation, p.stream_id

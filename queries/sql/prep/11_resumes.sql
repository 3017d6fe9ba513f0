-- name: a_resumes
-- purpose: one row per RESUME_PENDING: the cursor the client presented and the acknowledged
--          position at that resume, defined here once for every cursor rule. The
--          acknowledged position is the later (by seq on the stream) of the last
--          `last_acked_event_id` the stream recorded up to the resume (on any row:
--          STREAM_OPEN, DISCONNECTED, the RESUME_PENDING itself) and the resume cursor
--          `resume_from_event_id`. Event ids are opaque: seqs come from the event log.
-- needs: streams
CREATE OR REPLACE TABLE a_resumes AS
WITH ordered AS (
    SELECT session_hmac, generation, stream_id, state, ts, file_id, pos,
           resume_from_event_id,
           last_value(last_acked_event_id IGNORE NULLS)
               OVER (w ROWS UNBOUNDED PRECEDING) AS last_acked_event_id,
           lead(state) OVER w AS next_state
    FROM streams
    WINDOW w AS (PARTITION BY session_hmac, generation, stream_id ORDER BY ts, file_id, pos)
),
resumes AS (
    SELECT * FROM ordered WHERE state = 'RESUME_PENDING'
)
SELECT r.session_hmac, r.generation, r.stream_id, r.ts, r.next_state,
       r.resume_from_event_id, c.stream_id AS cursor_stream_id, c.seq AS cursor_seq,
       r.last_acked_event_id, a.seq AS last_acked_seq,
       -- Only positions on the stream itself order its events (a misrouted cursor's seq
       -- counts another stream's events).
       CASE WHEN a.stream_id = r.stream_id AND c.stream_id = r.stream_id
                THEN greatest(a.seq, c.seq)
            WHEN a.stream_id = r.stream_id THEN a.seq
            WHEN c.stream_id = r.stream_id THEN c.seq END AS acked_seq
FROM resumes r
LEFT JOIN a_event_index c
  ON c.session_hmac = r.session_hmac AND c.generation = r.generation
 AND c.event_id = r.resume_from_event_id
LEFT JOIN a_event_index a
  ON a.session_hmac = r.session_hmac AND a.generation = r.generation
 AND a.event_id = r.last_acked_event_id;

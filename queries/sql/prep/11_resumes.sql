-- name: a_resumes
-- purpose: one row per RESUME_PENDING: the cursor the client presented and the acknowledged
--          position at that resume, defined here once for every cursor rule. The
--          acknowledged position is the later (by seq on the stream) of the last
--          `last_acked_event_id` the stream recorded up to the resume (on any row:
--          STREAM_OPEN, DISCONNECTED, the RESUME_PENDING itself) and the resume cursor
--          `resume_from_event_id`. Event ids are opaque: seqs come from the event log.
-- needs: streams
-- Only the streams that were resumed are ordered (a few of every stream), and only the
-- event ids their resumes name are looked up in the event index (its hash table was built
-- on the whole index, twice).
CREATE OR REPLACE TABLE a_resumes AS
WITH resumed AS (
    SELECT DISTINCT session_hmac, generation, stream_id FROM streams
    WHERE state = 'RESUME_PENDING'
),
-- The ledger rows of the resumed streams' sessions, found by the session key alone first
-- (materialized, so it stays first): on one key DuckDB filters the scan by a Bloom filter
-- of the few sessions, on three it probed every ledger row (35.2M at 100M events). A
-- stream logged without its session is found as the NULL-safe join found it.
session_rows AS MATERIALIZED (
    SELECT s.session_hmac, s.generation, s.stream_id, s.state, s.ts, s.file_id, s.pos,
           s.resume_from_event_id, s.last_acked_event_id
    FROM streams s
    SEMI JOIN (SELECT DISTINCT session_hmac FROM resumed) k
      ON k.session_hmac = s.session_hmac
    UNION ALL
    SELECT s.session_hmac, s.generation, s.stream_id, s.state, s.ts, s.file_id, s.pos,
           s.resume_from_event_id, s.last_acked_event_id
    FROM streams s
    WHERE s.session_hmac IS NULL
      AND EXISTS (SELECT 1 FROM resumed WHERE session_hmac IS NULL)
),
ordered AS (
    SELECT s.session_hmac, s.generation, s.stream_id, s.state, s.ts, s.file_id, s.pos,
           s.resume_from_event_id,
           last_value(s.last_acked_event_id IGNORE NULLS)
               OVER (w ROWS UNBOUNDED PRECEDING) AS last_acked_event_id,
           lead(s.state) OVER w AS next_state
    FROM session_rows s
    SEMI JOIN resumed r
      ON s.session_hmac IS NOT DISTINCT FROM r.session_hmac
     AND s.generation IS NOT DISTINCT FROM r.generation
     AND s.stream_id IS NOT DISTINCT FROM r.stream_id
    WINDOW w AS (PARTITION BY s.session_hmac, s.generation, s.stream_id
                 ORDER BY s.ts, s.file_id, s.pos)
),
resumes AS (
    SELECT * FROM ordered WHERE state = 'RESUME_PENDING'
),
named AS (
    SELECT session_hmac, generation, resume_from_event_id AS event_id FROM resumes
    UNION
    SELECT session_hmac, generation, last_acked_event_id FROM resumes
),
-- The index's rows of those ids (03_event_index.sql): of an id logged more than once its
-- row of `a_event_repeats`, else its event. The events are looked up first (materialized:
-- the planner otherwise checks every event against the repeated ids before the look-up, as
-- the index's view does, a fifth of the step at 10M events) and only the few found are
-- checked against the repeated ids. The events looked up are those of the named ids'
-- sessions, found by the session key alone first (as the ledger rows above): the look-up
-- on three keys probed every event (102M at 100M events).
named_sessions_events AS MATERIALIZED (
    SELECT e.session_hmac, e.generation, e.event_id, e.stream_id, e.seq
    FROM events e
    SEMI JOIN (SELECT DISTINCT session_hmac FROM named) k
      ON k.session_hmac = e.session_hmac
),
looked_up AS MATERIALIZED (
    SELECT session_hmac, generation, event_id, stream_id, seq
    FROM named_sessions_events SEMI JOIN named USING (session_hmac, generation, event_id)
),
positions AS (
    SELECT session_hmac, generation, event_id, stream_id, seq
    FROM a_event_repeats SEMI JOIN named USING (session_hmac, generation, event_id)
    UNION ALL
    SELECT e.session_hmac, e.generation, e.event_id, e.stream_id, e.seq
    FROM looked_up e
    ANTI JOIN a_event_repeats r
      ON e.session_hmac IS NOT DISTINCT FROM r.session_hmac
     AND e.generation IS NOT DISTINCT FROM r.generation
     AND e.event_id IS NOT DISTINCT FROM r.event_id
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
LEFT JOIN positions c
  ON c.session_hmac = r.session_hmac AND c.generation = r.generation
 AND c.event_id = r.resume_from_event_id
LEFT JOIN positions a
  ON a.session_hmac = r.session_hmac AND a.generation = r.generation
 AND a.event_id = r.last_acked_event_id;

-- name: a_server_missing
-- purpose: events the server produced on a stream and, by its own log, never delivered
--          (basis `server`, for sessions without client receipts): an event dropped and
--          never sent or replayed later; or, at a resume with a cursor of that stream that
--          reopened, an event stored after the cursor and before the resume that the store
--          did not replay. Priming and heartbeat events never count.
-- needs: events, streams
-- The sessions (and generations) the server judges: events logged and no client receipt
-- at all (a_server_sessions: the gate facts take these sessions' delivered events from
-- the log). Named ones: a row of no session or generation matches none anyway.
CREATE OR REPLACE TABLE a_server_sessions AS
SELECT DISTINCT session_hmac, generation FROM events
ANTI JOIN a_inbox_sessions USING (session_hmac, generation)
WHERE session_hmac IS NOT NULL AND generation IS NOT NULL;

CREATE OR REPLACE TABLE a_server_missing AS
WITH own AS (SELECT session_hmac, generation FROM a_server_sessions),
dropped AS (
    SELECT session_hmac, generation, stream_id, event_id, seq, kind, cumulative, first_ts,
           'dropped' AS how
    FROM a_event_index SEMI JOIN own USING (session_hmac, generation)
    WHERE dropped AND NOT delivered
),
ordered AS (
    SELECT s.*, lead(state) OVER (PARTITION BY session_hmac, generation, stream_id
                                  ORDER BY ts, file_id, pos) AS next_state
    FROM streams s SEMI JOIN own USING (session_hmac, generation)
),
resumes AS (
    SELECT o.session_hmac, o.generation, o.stream_id, o.ts, c.seq AS cursor_seq
    FROM ordered o
    JOIN a_event_index c
      ON c.session_hmac = o.session_hmac AND c.generation = o.generation
     AND c.event_id = o.resume_from_event_id AND c.stream_id = o.stream_id
    WHERE o.state = 'RESUME_PENDING' AND o.next_state = 'STREAM_OPEN'
),
replays AS (
    SELECT session_hmac, generation, stream_id, event_id, ts
    FROM events SEMI JOIN own USING (session_hmac, generation)
    WHERE disposition = 'replayed'
),
skipped AS (
    SELECT DISTINCT e.session_hmac, e.generation, e.stream_id, e.event_id, e.seq, e.kind,
           e.cumulative, e.first_ts, 'not_replayed' AS how
    FROM resumes r
    JOIN a_event_index e
      ON e.session_hmac = r.session_hmac AND e.generation = r.generation
     AND e.stream_id = r.stream_id AND e.seq > r.cursor_seq AND e.first_ts < r.ts
    WHERE NOT e.dropped
      AND NOT EXISTS (SELECT 1 FROM replays p
                       WHERE p.session_hmac = e.session_hmac AND p.generation = e.generation
                         AND p.stream_id = e.stream_id AND p.event_id = e.event_id
                         AND p.ts >= r.ts)
)
SELECT * FROM (SELECT * FROM dropped UNION ALL SELECT * FROM skipped)
WHERE loss_counted(kind);

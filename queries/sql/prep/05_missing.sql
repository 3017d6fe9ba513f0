-- name: a_missing
-- purpose: events a client never accepted although it accepted later ones of the same
--          ORIGIN stream (holes), or, on a completed stream, events after its last accepted
--          one (tail). Priming and heartbeat events never count.
--          Only sessions with client receipts are judged here (basis `client`); the others
--          by what the server logged (a_server_missing).
-- needs: inbox, events, streams
CREATE OR REPLACE TABLE a_inbox_sessions AS
SELECT DISTINCT session_hmac, generation FROM inbox;

CREATE OR REPLACE TABLE a_missing AS
-- Without the event log a hole is a fact only where the client numbered every data event it
-- should have got: the synthetic sessions of `replaygate probe`, whose seqs count the data
-- events of an uncut reference call (never priming or heartbeats). Other clients' seqs may
-- skip a heartbeat, or leave an event unplaced: their sessions need the event log.
-- (a_inbox_sessions: the sessions of `inbox`, which are a_inbox's)
WITH unjudged AS (
    SELECT session_hmac, generation
    FROM a_inbox_sessions
    ANTI JOIN events e USING (session_hmac, generation)
    WHERE session_hmac NOT IN (SELECT session_hmac FROM a_sessions
                               WHERE is_probe(client_name, principal))
),
acc AS (
    SELECT DISTINCT session_hmac, generation, origin_stream_id AS stream_id, seq
    FROM a_inbox
    ANTI JOIN unjudged USING (session_hmac, generation)
    WHERE verdict = 'accepted' AND seq IS NOT NULL AND origin_stream_id IS NOT NULL
),
acc_stats AS (
    SELECT session_hmac, generation, stream_id, min(seq) AS lo, max(seq) AS hi,
           count(*) AS n
    FROM acc GROUP BY ALL
),
completed AS (
    SELECT DISTINCT session_hmac, generation, stream_id
    FROM streams SEMI JOIN a_inbox_sessions USING (session_hmac, generation)
    WHERE is_completed(state, close_reason)
),
produced AS (
    SELECT session_hmac, generation, stream_id, max(seq) AS last_seq
    FROM a_event_index GROUP BY ALL
),
-- Most streams are whole: only those with a hole or an unaccepted tail go further.
candidates AS (
    SELECT session_hmac, generation, stream_id, a.hi
    FROM acc_stats a
    WHERE a.hi - a.lo + 1 > a.n
    UNION
    SELECT c.session_hmac, c.generation, c.stream_id, a.hi
    FROM completed c
    JOIN produced p USING (session_hmac, generation, stream_id)
    LEFT JOIN acc_stats a USING (session_hmac, generation, stream_id)
    WHERE p.last_seq > coalesce(a.hi, -1)
),
steps AS (
    SELECT acc.*, lag(acc.seq) OVER (PARTITION BY acc.session_hmac, acc.generation,
                                     acc.stream_id ORDER BY acc.seq) AS prev
    FROM acc SEMI JOIN candidates c USING (session_hmac, generation, stream_id)
),
holes AS (
    SELECT session_hmac, generation, stream_id, unnest(range(prev + 1, seq)) AS seq
    FROM steps
    WHERE seq > prev + 1
),
-- The completed candidates (a few streams) before the event log is read: joined to the
-- candidates and then to every completed stream, the planner built its hash table on the
-- event log (1M rows at 1M events).
completed_candidates AS (
    SELECT c.* FROM candidates c SEMI JOIN completed k USING (session_hmac, generation, stream_id)
),
tail AS (
    SELECT e.session_hmac, e.generation, e.stream_id, e.seq
    FROM a_event_index e
    JOIN completed_candidates c USING (session_hmac, generation, stream_id)
    WHERE e.seq > coalesce(c.hi, -1)
),
missing AS (
    SELECT * FROM holes
    UNION
    SELECT * FROM tail
)
SELECT m.session_hmac, m.generation, m.stream_id, m.seq,
       e.kind, coalesce(e.cumulative, false) AS cumulative, e.first_ts, e.event_id
FROM missing m
-- The event of each missing seq, looked up for those seqs alone; of two event ids logged
-- with one seq, the first logged, then the lower id (not whichever the scan met first).
LEFT JOIN (SELECT DISTINCT ON (session_hmac, generation, stream_id, seq) *
           FROM a_event_index
           SEMI JOIN missing USING (session_hmac, generation, stream_id, seq)
           ORDER BY session_hmac, generation, stream_id, seq, first_ts, event_id) e
    USING (session_hmac, generation, stream_id, seq)
WHERE loss_counted(e.kind);

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
-- Nothing of the size of the receipts or the event log is kept between the parts of this
-- statement: the accepted receipts are read again where they are needed (a kept copy of
-- them, and of the event index read twice, spilled at 10M events), their distinct seqs are
-- counted per stream in blocks of bits, and the event log is read once, for the streams
-- with a hole or a completed end.
WITH unjudged AS MATERIALIZED (
    SELECT session_hmac, generation
    FROM a_inbox_sessions
    ANTI JOIN events e USING (session_hmac, generation)
    WHERE session_hmac NOT IN (SELECT session_hmac FROM a_sessions
                               WHERE is_probe(client_name, principal))
),
acc AS NOT MATERIALIZED (
    SELECT session_hmac, generation, origin_stream_id AS stream_id, seq
    FROM a_inbox
    ANTI JOIN unjudged USING (session_hmac, generation)
    WHERE verdict = 'accepted' AND seq IS NOT NULL AND origin_stream_id IS NOT NULL
),
-- A stream has a hole when its seqs span more than it has distinct ones. Its seqs are
-- counted in blocks of 63 consecutive ones (seq // 63), each seq setting bit seq mod 63 of
-- its block's BIGINT: the bits set never count more than the block's distinct seqs, and
-- exactly as many for seqs of zero or more (a negative seq may share a bit with another
-- and make a candidate, never hide a hole; the holes below are exact). One grouping of the
-- receipts by stream and block replaces a count of every distinct (stream, seq).
acc_blocks AS (
    SELECT session_hmac, generation, stream_id, min(seq) AS lo, max(seq) AS hi,
           bit_or(1::BIGINT << ((seq % 63 + 63) % 63)) AS seen
    FROM acc
    GROUP BY session_hmac, generation, stream_id, seq // 63
),
acc_stats AS (
    SELECT session_hmac, generation, stream_id, min(lo) AS lo, max(hi) AS hi,
           sum(bit_count(seen)) AS distinct_seqs
    FROM acc_blocks GROUP BY ALL
),
gappy AS (
    SELECT session_hmac, generation, stream_id
    FROM acc_stats
    WHERE hi - lo + 1 > distinct_seqs
),
steps AS (
    SELECT *, lag(seq) OVER (PARTITION BY session_hmac, generation, stream_id ORDER BY seq) AS prev
    FROM (SELECT DISTINCT * FROM acc SEMI JOIN gappy USING (session_hmac, generation, stream_id))
),
holes AS (
    SELECT session_hmac, generation, stream_id, unnest(range(prev + 1, seq)) AS seq
    FROM steps
    WHERE seq > prev + 1
),
-- What the event log is read for, per stream: the seqs after its last accepted one (a
-- completed stream: `tails`) and its holes. Kept as rows, not a list per stream: a list
-- aggregate's state does not spill, and the grouping into lists ran out of memory at 10M
-- events under 200 MB (at 100M under 3 GB).
tails AS (
    SELECT c.session_hmac, c.generation, c.stream_id, coalesce(a.hi, -1) AS tail_after
    FROM (SELECT DISTINCT session_hmac, generation, stream_id
          FROM streams SEMI JOIN a_inbox_sessions USING (session_hmac, generation)
          WHERE is_completed(state, close_reason)) c
    LEFT JOIN acc_stats a USING (session_hmac, generation, stream_id)
),
-- The event log read once: every event looked up by a 64-bit hash of its stream (a table of
-- two numbers per tail or hole, not of three text keys); the few events found are joined
-- again by the full key, which drops what a collision let through (and DISTINCT the second
-- match it made: an event index row is one event id of a session).
ev_found AS (
    SELECT DISTINCT e.*
    FROM a_event_index e
    JOIN (SELECT hash(session_hmac, generation, stream_id) AS h, tail_after, NULL AS seq
          FROM tails
          UNION ALL
          SELECT hash(session_hmac, generation, stream_id), NULL, seq FROM holes) t
      ON hash(e.session_hmac, e.generation, e.stream_id) = t.h
    WHERE e.seq > t.tail_after OR e.seq = t.seq
),
ev AS (
    SELECT e.*, e.seq > t.tail_after AS in_tail
    FROM ev_found e
    LEFT JOIN tails t USING (session_hmac, generation, stream_id)
    LEFT JOIN holes h USING (session_hmac, generation, stream_id, seq)
    WHERE e.seq > t.tail_after OR h.seq IS NOT NULL
),
missing AS (
    SELECT * FROM holes
    UNION
    SELECT session_hmac, generation, stream_id, seq FROM ev WHERE in_tail
)
SELECT m.session_hmac, m.generation, m.stream_id, m.seq,
       e.kind, coalesce(e.cumulative, false) AS cumulative, e.first_ts, e.event_id
FROM missing m
-- The event of each missing seq; of two event ids logged with one seq, the first logged, then
-- the lower id (not whichever the scan met first).
LEFT JOIN (SELECT DISTINCT ON (session_hmac, generation, stream_id, seq) *
           FROM ev
           ORDER BY session_hmac, generation, stream_id, seq, first_ts, event_id) e
    USING (session_hmac, generation, stream_id, seq)
WHERE loss_counted(e.kind);

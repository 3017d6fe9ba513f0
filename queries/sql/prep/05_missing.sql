-- name: a_missing
-- purpose: events a client never accepted although it accepted later ones of the same
--          ORIGIN stream (holes), or, on a completed stream, events after its last accepted
--          one (tail). Priming and heartbeat events never count.
--          Only sessions with client receipts are judged here (basis `client`); the others
--          by what the server logged (a_server_missing).
-- needs: inbox, events, streams
-- Its session keys stored uncompressed (each row's its own: DuckDB's string compression of
-- them was most of writing the table).
CREATE OR REPLACE TABLE a_inbox_sessions (
    session_hmac VARCHAR USING COMPRESSION uncompressed,
    generation BIGINT
);

INSERT INTO a_inbox_sessions
SELECT DISTINCT session_hmac, generation FROM inbox;

CREATE OR REPLACE TABLE a_missing AS
-- Nothing of the size of the receipts or the event log is kept between the parts of this
-- statement: the accepted receipts are read again where they are needed (a kept copy of
-- them, and of the event index read twice, spilled at 10M events), their distinct seqs are
-- counted per stream in bits, and the event log is read once, for the streams with a hole
-- or a completed end.
WITH acc AS NOT MATERIALIZED (
    SELECT session_hmac, generation, origin_stream_id AS stream_id, seq
    FROM a_inbox
    WHERE verdict = 'accepted' AND seq IS NOT NULL AND origin_stream_id IS NOT NULL
),
-- One grouping of the accepted receipts by stream, with a row per completed stream's ledger
-- record (seq NULL) among them, answers both questions asked of a stream: has it a hole,
-- and after which seq is a completed stream's tail. A stream whose seqs span at most 63 has
-- a hole exactly when its seqs set fewer bits of a BIGINT (bit seq mod 63: the residues of
-- at most 63 consecutive numbers differ) than they span, and its holes are the seqs of the
-- span whose bit is not set (no receipt read again). One that spans more has a hole
-- for certain when it has fewer receipts than it spans; otherwise (a seq accepted twice may
-- hide one) its distinct seqs are counted in blocks of 63 consecutive ones (seq // 63, a
-- negative seq possibly sharing a bit: a candidate, never a hidden hole), and its holes are
-- found from its receipts. (Each of these was a grouping or a join of its own: the
-- receipts by stream and block, the blocks by stream, the completed streams made distinct
-- and joined with the receipts' last seqs; the holes of every stream with one were found
-- from its receipts, read again.)
stats AS (
    SELECT session_hmac, generation, stream_id, min(seq) AS lo, max(seq) AS hi,
           count(seq) AS n, bit_or(1::BIGINT << ((seq % 63 + 63) % 63)) AS mask,
           bool_or(completed) AS completed
    FROM (SELECT *, false AS completed FROM acc
          UNION ALL
          SELECT session_hmac, generation, stream_id, NULL, true
          -- (only a session with receipts has tails: its streams alone are looked up here,
          -- once, not the grouping's rows by every reader of the targets)
          FROM streams
          SEMI JOIN a_inbox_sessions USING (session_hmac, generation)
          WHERE is_completed(state, close_reason))
    GROUP BY ALL
),
long_blocks AS (
    SELECT session_hmac, generation, stream_id,
           bit_count(bit_or(1::BIGINT << ((seq % 63 + 63) % 63))) AS bits
    FROM acc
    SEMI JOIN (SELECT session_hmac, generation, stream_id FROM stats
               WHERE hi - lo >= 63 AND hi - lo + 1 <= n) USING (session_hmac, generation, stream_id)
    GROUP BY session_hmac, generation, stream_id, seq // 63
),
long_gappy AS (
    SELECT session_hmac, generation, stream_id
    FROM stats
    WHERE hi - lo >= 63 AND hi - lo + 1 > n
    UNION ALL
    SELECT session_hmac, generation, stream_id
    FROM long_blocks JOIN stats USING (session_hmac, generation, stream_id)
    GROUP BY session_hmac, generation, stream_id, lo, hi
    HAVING hi - lo + 1 > sum(long_blocks.bits)
),
steps AS (
    SELECT *, lag(seq) OVER (PARTITION BY session_hmac, generation, stream_id ORDER BY seq) AS prev
    FROM (SELECT DISTINCT * FROM acc SEMI JOIN long_gappy USING (session_hmac, generation, stream_id))
),
found_holes AS (
    SELECT session_hmac, generation, stream_id, seq
    FROM (SELECT session_hmac, generation, stream_id, mask, unnest(range(lo, hi + 1)) AS seq
          FROM stats
          WHERE hi - lo < 63 AND hi - lo + 1 > bit_count(mask))
    WHERE mask & (1::BIGINT << ((seq % 63 + 63) % 63)) = 0
    UNION ALL
    SELECT session_hmac, generation, stream_id, unnest(range(prev + 1, seq)) AS seq
    FROM steps
    WHERE seq > prev + 1
),
-- Without the event log a hole is a fact only where the client numbered every data event it
-- should have got: the synthetic sessions of `replaygate probe`, whose seqs count the data
-- events of an uncut reference call (never priming or heartbeats). Other clients' seqs may
-- skip a heartbeat, or leave an event unplaced: their sessions need the event log, and
-- the receipts of a session with receipts (a_inbox_sessions: the sessions of `inbox`) and
-- no event logged count for nothing: no hole, and a completed stream's tail after no seq.
-- Only the sessions that could show either are looked up among the events, not every
-- session with receipts: the holes' and those of the ids logged more than once (a session
-- without events has no other event to find below).
unjudged AS MATERIALIZED (
    SELECT session_hmac, generation
    FROM (SELECT session_hmac, generation FROM found_holes
          UNION
          SELECT session_hmac, generation FROM a_event_repeats)
    SEMI JOIN a_inbox_sessions USING (session_hmac, generation)
    ANTI JOIN events e USING (session_hmac, generation)
    WHERE session_hmac NOT IN (SELECT session_hmac FROM a_sessions
                               WHERE is_probe(client_name, principal))
),
holes AS MATERIALIZED (
    SELECT * FROM found_holes ANTI JOIN unjudged USING (session_hmac, generation)
),
-- What the event log is read for, per stream: the seqs after its last accepted one (a
-- completed stream of a session with receipts: `tail_after`) and its holes. Kept as rows,
-- not a list per stream: a list aggregate's state does not spill, and the grouping into
-- lists ran out of memory at 10M events under 200 MB (at 100M under 3 GB).
targets AS NOT MATERIALIZED (
    SELECT s.session_hmac, s.generation, s.stream_id,
           CASE WHEN u.session_hmac IS NULL THEN coalesce(s.hi, -1) ELSE -1 END AS tail_after,
           NULL AS seq
    FROM stats s
    LEFT JOIN unjudged u USING (session_hmac, generation)
    WHERE s.completed
    UNION ALL
    SELECT session_hmac, generation, stream_id, NULL, seq FROM holes
),
-- The event log read once, narrow: every event's 64-bit hash of its stream, its seq and its
-- place in its log (file id, position) are looked up among the targets' hashes and bounds,
-- and only the places of the few found are kept. Those events are read again by their place
-- (a semi join DuckDB applies in the scan before reading the other columns), with the
-- columns a missing event needs, and checked against their target by its full key (the
-- targets looked up by the hashes found first, so the check joins few rows with few), which
-- drops what a collision let through. (The join of every event with the targets carried the
-- event's and the target's text columns: under a tenth of the memory limit it went external
-- and wrote them, 3.9 GB at 10M events.) The events are read from their table, not the
-- event index: an event id logged more than once is left out of the few found and taken
-- from `a_event_repeats` (its row of the index), as the index does for every event (that
-- anti join of every event was a fifth of this statement at 10M). The places are a semi
-- join, so the planner counts them as fewer than the events and builds its table of them,
-- and the few read again are a table of their own, so the repeated ids are checked against
-- them alone (inline, both joins were planned over every event, with its columns).
hashed AS MATERIALIZED (
    SELECT hash(session_hmac, generation, stream_id) AS h, tail_after, seq AS t_seq
    FROM targets
),
placed AS (
    SELECT e.file_id, e.pos
    FROM events e
    SEMI JOIN hashed t
      ON hash(e.session_hmac, e.generation, e.stream_id) = t.h
     AND (e.seq > t.tail_after OR e.seq = t.t_seq)
),
reread AS MATERIALIZED (
    SELECT session_hmac, generation, stream_id, seq, event_id, kind,
           coalesce(cumulative, false) AS cumulative, ts AS first_ts
    FROM events
    SEMI JOIN placed USING (file_id, pos)
),
found AS MATERIALIZED (
    SELECT *
    FROM reread
    ANTI JOIN a_event_repeats r
      ON reread.session_hmac IS NOT DISTINCT FROM r.session_hmac
     AND reread.generation IS NOT DISTINCT FROM r.generation
     AND reread.event_id IS NOT DISTINCT FROM r.event_id
    UNION ALL
    SELECT session_hmac, generation, stream_id, seq, event_id, kind, cumulative, first_ts
    FROM a_event_repeats
    WHERE hash(session_hmac, generation, stream_id) IN (SELECT h FROM hashed)
),
ev AS (
    SELECT DISTINCT f.session_hmac, f.generation, f.stream_id, f.seq, f.event_id, f.kind,
           f.cumulative, f.first_ts, f.seq > t.tail_after AS in_tail
    FROM found f
    JOIN (SELECT * FROM targets
          WHERE hash(session_hmac, generation, stream_id)
                IN (SELECT hash(session_hmac, generation, stream_id) FROM found)) t
      ON f.session_hmac = t.session_hmac AND f.generation = t.generation
     AND f.stream_id = t.stream_id
    WHERE f.seq > t.tail_after OR f.seq = t.seq
),
missing AS (
    SELECT session_hmac, generation, stream_id, seq FROM holes
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

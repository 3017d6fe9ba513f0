-- name: a_inbox
-- purpose: receipts with origin stream, seq and kind resolved through the event log
--          when the client did not record them (only those rows are joined). Only what the
--          join adds is stored (`a_inbox_resolved`: the receipts that lacked one of them);
--          the others are read from `inbox` itself. A receipt's dispatch id is not among its
--          columns: no reader of `a_inbox` needs it (`inbox` has it), and writing it for the
--          resolved receipts cost about a tenth of the step.
-- needs: inbox
-- params: buckets, lo, hi
-- buckets: inbox 4000000 BY ts CHECKED BY a_inbox_far
-- 4,000,000 `inbox` rows a GB of the memory limit: 3 buckets at 100M under 12 GB. 5,000,000
-- (2 buckets) was faster for the statements alone (84.0, 88.3 against 101.6, 109.4 CPU s) but
-- slower in the whole analysis, where the steps before it hold the buffer pool: this step
-- 125.6 CPU s / 80.2 s against 105.9 / 56.0 in 3 buckets, the analysis 646.8 against 602.8
-- CPU s (once each, page cache dropped, docs/performance.md).
-- The buckets are ranges of the receipts' time, not of their sessions' hashes: `inbox` and
-- `events` are stored about in time order, so a bucket reads its own row groups of each
-- (DuckDB skips the others by their zone maps) where a range of hashes read both tables
-- whole in every bucket, three times in all at 100M. A receipt's event is looked up among
-- the events of its bucket's range and an hour either side; `a_inbox_far` (below) lists
-- the receipts whose event may lie farther, and any of them runs the file again in one
-- bucket (queries/buckets.py).
-- The event id is stored uncompressed: nearly every receipt's id is its own, and DuckDB's
-- string compression of it (FSST: about half its bytes, 50 MB at 10M events) was about a
-- third of writing the 5.06M resolved receipts. The other columns compress as DuckDB
-- chooses (the session key uncompressed as well saved no more, for 0.3 GB more memory).
CREATE OR REPLACE TABLE a_inbox_resolved (
    ts TIMESTAMPTZ,
    session_hmac VARCHAR,
    generation BIGINT,
    stream_id VARCHAR,
    event_id VARCHAR USING COMPRESSION uncompressed,
    verdict VARCHAR,
    origin_stream_id VARCHAR,
    seq BIGINT,
    kind VARCHAR
);

INSERT INTO a_inbox_resolved
-- The event index (03_event_index.sql) is an event's own row unless its id was logged more
-- than once: a receipt is looked up among the repeated ids (a_event_repeats: 23,781 rows at
-- 10M events), and only when its id is not one of them among the events themselves, where
-- its key is then on one row at most. Through the index's view the lookup built a table of
-- every event after an anti join of all of them with the repeated ids; this way the
-- receipts are the smaller side, and no event is read twice. A receipt's columns come from
-- the one of the two that matched (the other's are NULL).
SELECT i.ts, i.session_hmac, i.generation, i.stream_id, i.event_id, i.verdict,
       coalesce(i.origin_stream_id, e.stream_id) AS origin_stream_id,
       coalesce(i.seq, e.seq) AS seq,
       coalesce(i.kind, e.kind) AS kind
--
-- In buckets of time (queries/buckets.py, the header's `buckets`): the join's hash table
-- holds the receipts of one bucket. At 100M events the 50M receipts without a place did not
-- fit in 12 GB, and the join went external: 207 CPU s, x25 its time at 10M. One bucket
-- (10M events under 3 GB) is the plan without the test. The bounds are epoch microseconds,
-- NULL at the open ends: the test folds to a comparison of `ts` with a constant, which
-- DuckDB checks against each row group's zone map.
--
-- The repeated ids' values are merged into the receipt's own before the join with the
-- events, with a flag saying one matched: the receipts are the join's hash table, and
-- carrying the repeated ids' four columns into it beside the receipt's three (nearly
-- always NULL) made each row wider for nothing.
FROM (SELECT i.ts, i.session_hmac, i.generation, i.stream_id, i.event_id, i.verdict,
             coalesce(i.origin_stream_id, r.stream_id) AS origin_stream_id,
             coalesce(i.seq, r.seq) AS seq,
             coalesce(i.kind, r.kind) AS kind,
             r.event_id IS NOT NULL AS repeated
      FROM (SELECT * FROM inbox
            WHERE NOT receipt_placed(origin_stream_id, seq, kind)
              AND ($buckets = 1 OR (($lo IS NULL OR ts >= make_timestamptz($lo))
                                    AND ($hi IS NULL OR ts < make_timestamptz($hi))))) i
      LEFT JOIN a_event_repeats r USING (session_hmac, generation, event_id)) i
LEFT JOIN (SELECT * FROM events
           WHERE $buckets = 1
              OR (($lo IS NULL OR ts >= make_timestamptz($lo) - INTERVAL 1 HOUR)
                  AND ($hi IS NULL OR ts < make_timestamptz($hi) + INTERVAL 1 HOUR))) e
  ON NOT i.repeated
 AND e.session_hmac = i.session_hmac AND e.generation = i.generation
 AND e.event_id = i.event_id;

-- What the buckets of time may have missed: a receipt left without a place, not of a
-- repeated id, whose event is logged more than an hour from it (or without a time), so maybe
-- outside its bucket's range of events. Any row, and the file runs again in one bucket
-- (queries/buckets.py; read only after buckets). A receipt whose event is within the hour
-- was looked up among the events of its range: its event, if any, was found.
CREATE OR REPLACE TEMP VIEW a_inbox_far AS
SELECT r.session_hmac, r.generation, r.event_id
FROM a_inbox_resolved r
JOIN events e
  ON e.session_hmac = r.session_hmac AND e.generation = r.generation
 AND e.event_id = r.event_id
WHERE NOT receipt_placed(r.origin_stream_id, r.seq, r.kind)
  AND coalesce(e.ts NOT BETWEEN r.ts - INTERVAL 1 HOUR AND r.ts + INTERVAL 1 HOUR, true)
  AND NOT EXISTS (SELECT 1 FROM a_event_repeats p
                  WHERE p.session_hmac = r.session_hmac AND p.generation = r.generation
                    AND p.event_id = r.event_id);

-- Temporary, bound when read, as a_event_index (03_event_index.sql); other connections (the
-- dashboard) read the same union of `inbox` and `a_inbox_resolved`.
CREATE OR REPLACE TEMP VIEW a_inbox AS
SELECT ts, session_hmac, generation, stream_id, event_id, verdict,
       origin_stream_id, seq, kind
FROM inbox WHERE receipt_placed(origin_stream_id, seq, kind)
UNION ALL
SELECT * FROM a_inbox_resolved;

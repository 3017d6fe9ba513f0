-- name: a_event_index
-- purpose: one row per event id of a session: the stream it belongs to, its seq and kind.
--          Event ids are opaque (stream:seq, stream_ms_rand, uuid): the log tells, we never parse.
--          The stream is the one that produced it: a `replayed` row names the stream it was
--          replayed on, which differs from it when a replay crossed streams.
--          Nearly every event id is logged once, and then its row is the event itself: only
--          the ids logged more than once are grouped and stored (`a_event_repeats`); the
--          index is a view of the events over them (writing one wide row per event was
--          most of the prepare step at 10M events).
-- needs: events
-- The rows of the ids logged more than once are kept as read (`a_event_repeat_rows`: 47,562
-- of 10.2M events at 10M), then grouped: a reader that needs a repeated id's rows themselves
-- (`cross_stream_acceptance`'s replayed rows on another stream than their id's) reads this
-- small table instead of scanning every event again for them (15.3 of its operator seconds
-- at 100M events: a filter on `disposition` that no zone map prunes).
CREATE OR REPLACE TABLE a_event_repeat_rows AS
-- A 64-bit hash first: only the rows whose hash repeats are kept (the grouping below drops
-- what a collision let through). The repeated hashes are found by sorting them (a hash
-- equal to the next one in order repeats): a grouping of the hashes held a group per event
-- (10.2M at 10M events), and cost more CPU the more memory it was given; the sort costs
-- the same under a tenth of the memory limit. (Sorted with each row's id, and the rows read
-- again by it, the sort cost more than the narrower second read saved: docs/performance.md.)
WITH hashes AS (
    SELECT hash(session_hmac, generation, event_id) AS h FROM events
),
repeated AS (
    SELECT DISTINCT h
    FROM (SELECT h, lead(h) OVER (ORDER BY h) AS next_h FROM hashes)
    WHERE h = next_h
)
SELECT session_hmac, generation, event_id, stream_id, seq, kind, cumulative, ts, file_id,
       pos, disposition
FROM events
WHERE hash(session_hmac, generation, event_id) IN (SELECT h FROM repeated);

CREATE OR REPLACE TABLE a_event_repeats AS
SELECT session_hmac, generation, event_id,
       coalesce(arg_min(stream_id, (ts, file_id, pos)) FILTER (WHERE disposition <> 'replayed'),
                min(stream_id)) AS stream_id,
       coalesce(arg_min(seq, (ts, file_id, pos)) FILTER (WHERE disposition <> 'replayed'),
                min(seq)) AS seq,
       min(kind) AS kind,
       bool_or(coalesce(cumulative, false)) AS cumulative,
       min(ts) AS first_ts,
       bool_or(disposition = 'dropped') AS dropped,
       bool_or(disposition = 'replayed') AS replayed,
       bool_or(disposition IN ('sent', 'replayed')) AS delivered
FROM a_event_repeat_rows
GROUP BY session_hmac, generation, event_id
HAVING count(*) > 1;

-- A temporary view: bound when read, so in an incremental run (whose search path puts the
-- affected sessions' copies of `events` and `a_event_repeats` first) it reads those. It
-- reads `events`, which capability.shadow never hides (no detector's units are events).
-- A single row's aggregates above are its own values: the view gives them directly.
CREATE OR REPLACE TEMP VIEW a_event_index AS
SELECT e.session_hmac, e.generation, e.event_id, e.stream_id, e.seq, e.kind,
       coalesce(e.cumulative, false) AS cumulative,
       e.ts AS first_ts,
       e.disposition = 'dropped' AS dropped,
       e.disposition = 'replayed' AS replayed,
       e.disposition IN ('sent', 'replayed') AS delivered
FROM events e
ANTI JOIN a_event_repeats r
  ON e.session_hmac IS NOT DISTINCT FROM r.session_hmac
 AND e.generation IS NOT DISTINCT FROM r.generation
 AND e.event_id IS NOT DISTINCT FROM r.event_id
UNION ALL
SELECT * FROM a_event_repeats;

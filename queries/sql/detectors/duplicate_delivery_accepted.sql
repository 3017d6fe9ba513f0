-- name: duplicate_delivery_accepted
-- invariant: a dedup key (generation, stream_id, event_id, message_digest) is accepted at most once
-- failure: A client whose persisted cursor lags one event gets the event again on resume and
--   its dedup check fails, so the same event is processed twice.
-- dashboard: Streams & replay: a `high` row per dedup key; the inspector shows two accepted
--   receipts of one event.
-- fix: Deduplicate on (generation, stream id, event id, message digest) in the client's durable
--   inbox, and persist the cursor together with the accepted event.
-- severity: high
-- needs: inbox
-- facts: none
-- unit: dedup key
-- page: streams
-- Keys are first counted by a 64-bit hash (cheap); only the receipts whose hash repeats are
-- read again and grouped by the full key, so a hash collision can never make a finding.
-- The hash leaves the message digest out: a receipt repeated with another digest is read
-- again and dropped by the grouping, and hashing the digest's 64 characters on every
-- accepted receipt was a fifth of this query at 10M events.
-- (The receipts are read again rather than kept: a kept copy of every accepted receipt,
-- all its columns, was most of this query's memory and spilled at 10M.) The second read
-- takes the hashed columns and each row's place (file id, position) alone; the columns a
-- finding shows are read last, by a join on those few places that DuckDB's scan applies
-- before reading them (every column of every accepted receipt read again for the few
-- hundred that repeat was half of this query at 10M events).
-- The repeated hashes are found by sorting them (a hash equal to the next one in order
-- repeats), as the event index finds its repeated ids: a grouping of the hashes held a group
-- per accepted receipt (10.1M at 10M events) for the few hundred that repeat.
WITH hashes AS (
    SELECT hash(session_hmac, generation, stream_id, event_id) AS h
    FROM inbox
    WHERE verdict = 'accepted'
),
repeated AS (
    SELECT DISTINCT h AS k
    FROM (SELECT h, lead(h) OVER (ORDER BY h) AS next_h FROM hashes)
    WHERE h = next_h
),
-- (a place that were not one row's could only add rows of keys not repeated, which the
-- HAVING drops: every row of a repeated key is found)
found AS (
    SELECT file_id, pos
    FROM inbox
    WHERE verdict = 'accepted'
      AND hash(session_hmac, generation, stream_id, event_id) IN (SELECT k FROM repeated)
)
SELECT session_hmac, generation, stream_id, event_id, 'high' AS severity, min(ts) AS ts,
       json_object('accepted', count(*), 'message_digest', message_digest,
                   'deliveries', list(delivery ORDER BY ts, file_id, pos)) AS detail
FROM inbox
SEMI JOIN found USING (file_id, pos)
WHERE verdict = 'accepted'
GROUP BY session_hmac, generation, stream_id, event_id, message_digest
HAVING count(*) >= 2

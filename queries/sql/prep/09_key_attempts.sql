-- name: a_key_differing
-- purpose: attempts that reused an idempotency key with a payload other than the key's
--          first attempt (the reference)
-- needs: dispatches
-- A key attempted once differs from no first attempt: only the keys attempted more than
-- once are grouped. They are found by sorting every keyed attempt's 64-bit hash (as the event
-- index finds its repeated ids), then grouped by their text, which drops what a collision let
-- through. (Grouping every key by its text, a group per key with a text state ordered by a
-- struct, grew x14 from 10M events to 100M: its hash table of 6.7M keys outgrew the caches.)
CREATE OR REPLACE TABLE a_key_differing AS
WITH hashes AS (
    SELECT hash(idempotency_key) AS h FROM dispatches WHERE idempotency_key IS NOT NULL
),
repeated AS (
    SELECT DISTINCT h
    FROM (SELECT h, lead(h) OVER (ORDER BY h) AS next_h FROM hashes)
    WHERE h = next_h
),
firsts AS (
    SELECT idempotency_key, arg_min(payload_digest, (ts, file_id, pos)) AS first_digest
    FROM dispatches
    WHERE idempotency_key IS NOT NULL AND hash(idempotency_key) IN (SELECT h FROM repeated)
    GROUP BY ALL
)
SELECT d.*
FROM dispatches d JOIN firsts f USING (idempotency_key)
WHERE d.payload_digest IS DISTINCT FROM f.first_digest;

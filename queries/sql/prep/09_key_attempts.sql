-- name: a_key_differing
-- purpose: attempts that reused an idempotency key with a payload other than the key's
--          first attempt (the reference)
-- needs: dispatches
CREATE OR REPLACE TABLE a_key_differing AS
WITH firsts AS (
    SELECT idempotency_key, arg_min(payload_digest, (ts, file_id, pos)) AS first_digest
    FROM dispatches WHERE idempotency_key IS NOT NULL GROUP BY ALL
)
SELECT d.*
FROM dispatches d JOIN firsts f USING (idempotency_key)
WHERE d.payload_digest IS DISTINCT FROM f.first_digest;

-- name: idempotency_conflict
-- invariant: an idempotency key is reused only for the same payload (informational when the server refuses it with 409)
-- severity: medium
-- needs: dispatches
-- unit: idempotency_key
WITH firsts AS (
    SELECT idempotency_key, arg_min(payload_digest, ts) AS first_digest
    FROM dispatches WHERE idempotency_key IS NOT NULL GROUP BY ALL
),
differing AS (
    SELECT d.* FROM dispatches d JOIN firsts f USING (idempotency_key)
    WHERE d.payload_digest IS DISTINCT FROM f.first_digest
)
SELECT idempotency_key, 'medium' AS severity, min(ts) AS ts,
       min(session_hmac) AS session_hmac,
       json_object('differing_attempts', count(*), 'dispatches', list(dispatch_id ORDER BY ts))
           AS detail
FROM differing
GROUP BY idempotency_key
HAVING bool_and(outcome = 'idempotency_conflict')

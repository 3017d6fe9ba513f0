-- name: conflict_executed
-- invariant: a reused idempotency key with another payload is never executed
-- severity: critical
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
SELECT idempotency_key, 'critical' AS severity, min(ts) AS ts,
       min(session_hmac) AS session_hmac,
       arg_min(dispatch_id, ts) FILTER (WHERE outcome = 'executed') AS dispatch_id,
       json_object('executed', count(*) FILTER (WHERE outcome = 'executed'),
                   'dispatches', list(dispatch_id ORDER BY ts)) AS detail
FROM differing
GROUP BY idempotency_key
HAVING bool_or(outcome = 'executed')

-- name: idempotency_conflict
-- invariant: an idempotency key is reused only for the same payload (informational when the server refuses it with 409)
-- severity: medium
-- needs: dispatches
-- facts: dispatches.payload_digest
-- units: dispatches WHERE idempotency_key IS NOT NULL BY idempotency_key
-- unit: idempotency_key
-- page: dispatch
SELECT idempotency_key, 'medium' AS severity, min(ts) AS ts,
       min(session_hmac) AS session_hmac,
       json_object('differing_attempts', count(*), 'dispatches', list(dispatch_id ORDER BY ts))
           AS detail
FROM a_key_differing
GROUP BY idempotency_key
HAVING bool_and(outcome = 'idempotency_conflict')

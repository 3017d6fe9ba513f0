-- name: missing_idempotency_key
-- invariant: every executed write or paid tool call carries an idempotency key
-- severity: high
-- needs: dispatches
-- facts: dispatches.tool_class
-- units: dispatches WHERE outcome = 'executed' BY dispatch_id
-- unit: dispatch_id
-- page: dispatch
SELECT dispatch_id, session_hmac, generation, 'high' AS severity, ts,
       json_object('tool_name', tool_name, 'tool_class', tool_class, 'principal', principal)
           AS detail
FROM dispatches
WHERE outcome = 'executed' AND tool_class IN ('write', 'paid')
  AND (idempotency_key IS NULL OR trim(idempotency_key) = '')

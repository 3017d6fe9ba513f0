-- name: missing_idempotency_key
-- invariant: every executed write or paid tool call carries an idempotency key
-- failure: Retried writes are forwarded with no idempotency key, so nothing downstream can tell
--   a re-send from a new request.
-- reports: KeeperHub/keeperhub issue 2207, hostinger/api-mcp-server issue 68 (retried writes
--   forwarded with no idempotency key)
-- dashboard: Overview: the `write_idempotency` gate fails in write stages; Dispatch &
--   idempotency lists a `high` row per dispatch.
-- fix: Require an idempotency key on every write or paid tool (declare it in the tool's input
--   schema) and pass it through to the system that executes it.
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
WHERE outcome = 'executed' AND is_write(tool_class)
  AND (idempotency_key IS NULL OR trim(idempotency_key) = '')

-- name: conflict_executed
-- invariant: a reused idempotency key with another payload is never executed
-- failure: A server accepts a reused idempotency key with a different payload and executes it:
--   the key protects nothing.
-- dashboard: Dispatch & idempotency: a `critical` row per key with the executed dispatches.
-- fix: Store the payload digest with each key and answer a mismatch with 409 without executing.
-- severity: critical
-- needs: dispatches
-- facts: dispatches.payload_digest
-- units: dispatches WHERE idempotency_key IS NOT NULL BY idempotency_key
-- unit: idempotency_key
-- page: dispatch
SELECT idempotency_key, 'critical' AS severity, min(ts) AS ts,
       min(session_hmac) AS session_hmac,
       arg_min(dispatch_id, (ts, dispatch_id)) FILTER (WHERE outcome = 'executed') AS dispatch_id,
       json_object('executed', count(*) FILTER (WHERE outcome = 'executed'),
                   'dispatches', list(dispatch_id ORDER BY ts, dispatch_id)) AS detail
FROM a_key_differing
-- a_key_differing compares every attempt of a key with its first; one in a dispatch file
-- that records no digest while another does compares as differing, a payload unknown: the
-- key is `cannot_tell` for that file (its units, `-- facts:`), never a finding.
ANTI JOIN a_blind_dispatches b ON b.idempotency_key = a_key_differing.idempotency_key
GROUP BY idempotency_key
HAVING bool_or(outcome = 'executed')

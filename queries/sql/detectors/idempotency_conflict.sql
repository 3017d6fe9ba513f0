-- name: idempotency_conflict
-- invariant: an idempotency key is reused only for the same payload (informational when the server refuses it with 409)
-- failure: A client reuses an idempotency key for a different payload (a key per tool instead
--   of per operation); the server correctly refuses with 409.
-- dashboard: Dispatch & idempotency: a `medium` row per key with the conflicting attempts.
-- fix: Derive the key from the operation (one per logical call), never from the tool or session
--   alone.
-- severity: medium
-- needs: dispatches
-- facts: dispatches.payload_digest
-- units: dispatches WHERE idempotency_key IS NOT NULL BY idempotency_key
-- unit: idempotency_key
-- page: dispatch
SELECT idempotency_key, 'medium' AS severity, min(ts) AS ts,
       min(session_hmac) AS session_hmac,
       json_object('differing_attempts', count(*), 'dispatches', list(dispatch_id ORDER BY ts, file_id, pos))
           AS detail
FROM a_key_differing
-- a_key_differing compares every attempt of a key with its first; one in a dispatch file
-- that records no digest while another does compares as differing, a payload unknown: the
-- key is `cannot_tell` for that file (its units, `-- facts:`), never a finding.
ANTI JOIN a_blind_dispatches b ON b.idempotency_key = a_key_differing.idempotency_key
GROUP BY idempotency_key
HAVING bool_and(outcome = 'idempotency_conflict')

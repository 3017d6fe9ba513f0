-- name: slow_recovery
-- invariant: a disconnected stream is open again within the recovery threshold
-- severity: medium
-- needs: streams
-- facts: none
-- params: recovery_threshold_s
-- unit: stream
-- page: streams
SELECT session_hmac, generation, stream_id, 'medium' AS severity, min(disc_ts) AS ts,
       json_object('seconds', max(secs), 'threshold_s', $recovery_threshold_s) AS detail
FROM a_recoveries
WHERE secs > $recovery_threshold_s
GROUP BY session_hmac, generation, stream_id

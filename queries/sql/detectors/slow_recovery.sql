-- name: slow_recovery
-- invariant: a disconnected stream is open again within the recovery threshold
-- failure: Broken streams take many seconds to reopen: long retry values, slow cursor lookups
--   in a shared store, or a proxy that holds the reconnect.
-- dashboard: Streams & replay: the recovery histogram has a tail past the threshold line;
--   Overview: the `recovery_p99` gate fails when the p99 crosses it.
-- fix: Index the replay store by stream and event id, keep `retry` short, and make sure proxies
--   do not buffer SSE responses.
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

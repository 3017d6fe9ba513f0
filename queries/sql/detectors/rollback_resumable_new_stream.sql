-- name: rollback_resumable_new_stream
-- invariant: after a rollback, streams opened in the hygiene window are never resumed
-- failure: After a rollback the old version still offers resumption on new streams, so clients
--   resume against code that no longer supports it.
-- dashboard: Rollout: rollback verification is not verified; Streams & replay lists a
--   `critical` row per stream opened in the hygiene window.
-- fix: Turn resumption off for new streams as part of the rollback and keep it off until the
--   next stage starts.
-- severity: critical
-- needs: rollout, streams
-- facts: none
-- unit: stream
-- page: rollout
SELECT s.session_hmac, s.generation, s.stream_id, 'critical' AS severity,
       min(r.ts) AS ts,
       json_object('rolled_back_stage', min(h.stage), 'opened', min(s.opened_ts))
           AS detail
FROM a_streams s
JOIN a_hygiene h ON in_window(s.opened_ts, h.t0, h.t1)
JOIN streams r
  ON r.session_hmac = s.session_hmac AND r.generation = s.generation
 AND r.stream_id = s.stream_id AND r.state = 'RESUME_PENDING'
GROUP BY s.session_hmac, s.generation, s.stream_id

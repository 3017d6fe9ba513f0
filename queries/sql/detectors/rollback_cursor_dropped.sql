-- name: rollback_cursor_dropped
-- invariant: a rollback keeps the cursor index of live sessions: their streams opened before it still resume
-- failure: A rollback wipes the cursor index, so live sessions opened before it can no longer
--   resume.
-- dashboard: Rollout: rollback verification is not verified; a `high` row per stream that got
--   CURSOR_REJECTED in the hygiene window.
-- fix: Keep the cursor index of older generations until their sessions expire.
-- severity: high
-- needs: rollout, streams, sessions
-- facts: none
-- unit: stream
-- page: rollout
SELECT s.session_hmac, s.generation, s.stream_id, 'high' AS severity, min(r.ts) AS ts,
       json_object('rolled_back_stage', min(h.stage)) AS detail
FROM a_streams s
JOIN streams r
  ON r.session_hmac = s.session_hmac AND r.generation = s.generation
 AND r.stream_id = s.stream_id AND r.state = 'CURSOR_REJECTED'
JOIN a_hygiene h ON in_window(r.ts, h.t0, h.t1) AND s.opened_ts < h.t0
LEFT JOIN a_sessions x ON x.session_hmac = s.session_hmac
WHERE x.expired_ts IS NULL OR x.expired_ts > r.ts
GROUP BY s.session_hmac, s.generation, s.stream_id

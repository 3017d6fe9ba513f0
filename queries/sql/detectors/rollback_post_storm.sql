-- name: rollback_post_storm
-- invariant: after a rollback, a broken stream opened before it is resumed, not re-POSTed
-- failure: After a rollback clients re-POST broken requests instead of resuming them,
--   re-running operations (writes among them).
-- dashboard: Rollout: rollback verification is not verified; a `high` row per stream followed
--   by a re-POST of the same payload.
-- fix: Keep resumption for streams opened before the rollback, and make writes idempotent so a
--   re-POST is harmless.
-- severity: high
-- needs: rollout, streams, sessions
-- facts: streams.payload_digest, streams.method
-- units: streams WHERE state = 'DISCONNECTED' BY session_hmac, generation, stream_id
-- params: retry_window_s
-- unit: stream
-- page: rollout
WITH broken AS (
    SELECT s.session_hmac, s.generation, s.stream_id, s.payload_digest, d.ts AS disc_ts,
           h.stage
    FROM a_streams s
    JOIN a_sessions x ON x.session_hmac = s.session_hmac AND x.resumable
    JOIN streams d
      ON d.session_hmac = s.session_hmac AND d.generation = s.generation
     AND d.stream_id = s.stream_id AND d.state = 'DISCONNECTED'
    JOIN a_hygiene h ON in_window(d.ts, h.t0, h.t1) AND s.opened_ts < h.t0
    WHERE s.payload_digest IS NOT NULL
)
SELECT b.session_hmac, b.generation, b.stream_id, 'high' AS severity, min(b.disc_ts) AS ts,
       json_object('rolled_back_stage', min(b.stage),
                   'reposted_as', min(n.stream_id)) AS detail
FROM broken b
JOIN a_streams n
  ON n.session_hmac = b.session_hmac AND n.payload_digest = b.payload_digest
 AND n.method = 'POST' AND n.opened_ts > b.disc_ts
 AND epoch_ms(n.opened_ts) - epoch_ms(b.disc_ts) <= $retry_window_s * 1000
 AND NOT (n.generation = b.generation AND n.stream_id = b.stream_id)
WHERE NOT EXISTS (
    SELECT 1 FROM streams r
     WHERE r.session_hmac = b.session_hmac AND r.generation = b.generation
       AND r.stream_id = b.stream_id AND r.state = 'RESUME_PENDING'
       AND r.ts > b.disc_ts AND r.ts < n.opened_ts)
GROUP BY b.session_hmac, b.generation, b.stream_id

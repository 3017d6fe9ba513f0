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
-- undecided: same payload
-- units: streams WHERE state = 'DISCONNECTED' BY session_hmac, generation, stream_id
-- params: retry_window_s
-- unit: stream
-- page: rollout
-- A re-POST is a POST stream of the same session and payload digest opened within the
-- retry window after the break, before any resume of the broken stream (in any ledger
-- file, digests or not). A stream of a
-- ledger file that cannot show the payload digest or the method while another file shows
-- them (a_blind_streams: one server version records them, another does not) may be one:
-- a broken stream in no finding with such a candidate is `cannot_tell` ("same payload",
-- naming the first such file by path), never a pass. (The broken streams of such a file
-- are its own units, `cannot_tell` by `-- facts:`.)
-- The breaks inside a rollback window of resumable sessions come first (few), then the
-- streams of their sessions, read once by their session key alone: a join on one key
-- lets DuckDB filter the scan of a_streams by those sessions (a Bloom filter), a join on
-- two or three keys only by their range, so every stream was read, twice (10.2M and
-- 6.1M of 16.3M kept at 100M events).
-- A stream's payload digest is its first non-NULL one by record_order among its ledger
-- rows of every file, as a_streams took it before it stopped keeping it (about a tenth of
-- that step at 100M events): looked up among the ledger rows of the same sessions, by the
-- session key. This detector's `streams` leaves out the files that cannot show a digest
-- or a method (`-- facts:`), so a stream with rows in such a file takes the digest
-- a_blind_streams found among all its rows (it lists exactly those streams, each once);
-- every other stream has all its rows here. A stream's rows lie between its opened_ts and
-- last_ts (a_streams: the least and the greatest time of its rows, of every file), so the
-- ledger is read between the least and the greatest of those streams': DuckDB skips the
-- row groups outside by their zone maps (the session key's filter alone read every ledger
-- row's key: 0.09 -> 0.19 CPU s at 10M events, 1.1 -> 2.4 at 100M).
WITH breaks AS MATERIALIZED (
    SELECT d.session_hmac, d.generation, d.stream_id, d.ts AS disc_ts, h.stage, h.t0
    FROM streams d
    JOIN a_hygiene h ON in_window(d.ts, h.t0, h.t1)
    -- (a_sessions holds one row per session: a semi join keeps the rows as the join did)
    SEMI JOIN (SELECT session_hmac FROM a_sessions WHERE resumable) x
      ON x.session_hmac = d.session_hmac
    WHERE d.state = 'DISCONNECTED'
),
their_sessions AS MATERIALIZED (SELECT DISTINCT session_hmac FROM breaks),
their_rows AS MATERIALIZED (
    SELECT s.* FROM a_streams s
    SEMI JOIN their_sessions k ON k.session_hmac = s.session_hmac
),
digests AS (
    SELECT s.session_hmac, s.generation, s.stream_id,
           arg_min(s.payload_digest, record_order(s.ts, s.file_id, s.pos)) AS payload_digest
    FROM streams s
    SEMI JOIN their_sessions k ON k.session_hmac = s.session_hmac
    WHERE s.payload_digest IS NOT NULL
      AND s.ts >= (SELECT min(opened_ts) FROM their_rows)
      AND s.ts <= (SELECT max(last_ts) FROM their_rows)
    GROUP BY ALL
),
their_streams AS MATERIALIZED (
    SELECT s.*,
           CASE WHEN w.stream_id IS NULL THEN d.payload_digest ELSE w.payload_digest END
               AS payload_digest
    FROM their_rows s
    LEFT JOIN digests d
      ON d.session_hmac = s.session_hmac AND d.generation IS NOT DISTINCT FROM s.generation
     AND d.stream_id IS NOT DISTINCT FROM s.stream_id
    LEFT JOIN a_blind_streams w
      ON w.session_hmac = s.session_hmac AND w.generation = s.generation
     AND w.stream_id = s.stream_id
),
broken AS (
    SELECT s.session_hmac, s.generation, s.stream_id, s.payload_digest, d.disc_ts, d.stage
    FROM their_streams s
    JOIN breaks d
      ON d.session_hmac = s.session_hmac AND d.generation = s.generation
     AND d.stream_id = s.stream_id AND s.opened_ts < d.t0
    WHERE s.payload_digest IS NOT NULL
),
-- what a broken stream may have been re-POSTed as: a stream shown to be a POST of its
-- payload (file_id NULL), or one of a file blind to either (file_id: that file)
candidates AS (
    SELECT b.*, n.generation AS repost_generation, n.stream_id AS repost, n.opened_ts,
           NULL::BIGINT AS file_id,
           NULL::VARCHAR AS path
    FROM broken b
    JOIN their_streams n
      ON n.session_hmac = b.session_hmac AND n.payload_digest = b.payload_digest
     AND n.method = 'POST'
    UNION ALL
    SELECT b.*, w.generation, w.stream_id, w.opened_ts, w.file_id, w.path
    FROM broken b
    JOIN a_blind_streams w
      ON w.session_hmac = b.session_hmac
     AND coalesce(w.payload_digest, b.payload_digest) = b.payload_digest
     AND coalesce(w.method, 'POST') = 'POST'
     -- (one whose payload and method are both shown is a candidate above, or none)
     AND (w.payload_digest IS NULL OR w.method IS NULL)
),
reposts AS (
    SELECT c.* FROM candidates c
    WHERE c.opened_ts > c.disc_ts
      AND epoch_ms(c.opened_ts) - epoch_ms(c.disc_ts) <= $retry_window_s * 1000
      AND NOT (c.repost_generation = c.generation AND c.repost = c.stream_id)
      -- (a resume of every ledger file: a_resumes, not `streams`, which the capability
      -- plan restricts to the files that show payload digests)
      AND NOT EXISTS (
          SELECT 1 FROM a_resumes r
           WHERE r.session_hmac = c.session_hmac AND r.generation = c.generation
             AND r.stream_id = c.stream_id
             AND r.ts > c.disc_ts AND r.ts < c.opened_ts)
)
SELECT session_hmac, generation, stream_id, 'high' AS severity,
       min(disc_ts) FILTER (WHERE file_id IS NULL) AS ts,
       json_object('rolled_back_stage', min(stage) FILTER (WHERE file_id IS NULL),
                   'reposted_as', min(repost) FILTER (WHERE file_id IS NULL)) AS detail
FROM reposts
GROUP BY session_hmac, generation, stream_id
HAVING bool_or(file_id IS NULL)
UNION ALL
SELECT session_hmac, generation, stream_id, 'cannot_tell', min(disc_ts),
       json_object('missing', 'same payload', 'file_id', arg_min(file_id, path),
                   'rolled_back_stage', min(stage))
FROM reposts
GROUP BY session_hmac, generation, stream_id
HAVING bool_and(file_id IS NOT NULL)

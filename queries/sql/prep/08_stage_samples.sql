-- name: a_stage_samples
-- purpose: the samples behind the gates per stage, and per stage and revision: accepted
--          receipts, delivered events, completed streams, write dispatches and recoveries, each attributed to
--          a stage by stage_key (macros.sql); counts, last hour and p99 of recoveries
-- needs: rollout, inbox|events|streams|dispatches
CREATE OR REPLACE TABLE a_stage_samples AS
WITH facts AS (
    SELECT 'accepted_receipts' AS sample, ts, session_hmac, NULL::DOUBLE AS secs
    FROM inbox WHERE verdict = 'accepted'
    UNION ALL
    -- delivered events: accepted receipts where the client keeps an inbox, else the
    -- events the server's log shows it sent or replayed (what the server basis judges)
    SELECT 'delivered_events', ts, session_hmac, NULL
    FROM inbox WHERE verdict = 'accepted'
    UNION ALL
    SELECT 'delivered_events', e.ts, e.session_hmac, NULL
    FROM events e ANTI JOIN a_inbox_sessions USING (session_hmac, generation)
    WHERE e.kind <> 'priming' AND e.disposition IN ('sent', 'replayed')
    UNION ALL
    SELECT 'completed_streams', ts, session_hmac, NULL
    FROM streams WHERE state = 'CLOSED' AND close_reason = 'completed'
    UNION ALL
    SELECT 'write_dispatches', ts, session_hmac, NULL
    FROM dispatches WHERE tool_class IN ('write', 'paid')
    UNION ALL
    SELECT 'recoveries', disc_ts, session_hmac, secs
    FROM a_recoveries WHERE reopen_ts IS NOT NULL
),
staged AS (
    SELECT w.stage, f.sample, f.ts, f.secs,
           record_revision(f.session_hmac, a.protocol_version) AS revision
    FROM facts f
    LEFT JOIN a_sessions a ON a.session_hmac = f.session_hmac
    JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, f.ts)
),
-- the newest sample of each kind per stage, for the last hour (a group, not a window: the
-- window function partitioned every fact)
last AS (
    SELECT sample, stage, max(ts) AS last_ts_all FROM staged GROUP BY ALL
),
revised AS (
    SELECT * FROM staged JOIN last USING (sample, stage)
)
SELECT sample, stage, revision, count(*) AS n, min(ts) AS first_ts, max(ts) AS last_ts,
       count(*) FILTER (WHERE ts > last_ts_all - INTERVAL 1 HOUR) AS n_last_hour,
       quantile_cont(secs, 0.99) AS p99
FROM revised
GROUP BY GROUPING SETS ((sample, stage), (sample, stage, revision));

-- name: a_staging
-- purpose: the records the gates count, each attributed to a stage by the gates' rule:
--          a cohort session's record in its stage's window, a record without a known
--          session by window alone, a baseline session's record to no stage
-- needs: rollout
CREATE OR REPLACE TABLE a_cohort_window AS
SELECT a.session_hmac, w.stage, w.start_ts, w.end_ts
FROM a_sessions a JOIN a_stages w ON w.stage = a.cohort;

CREATE OR REPLACE TABLE a_proxy_staged AS
SELECT c.stage, p.*
FROM proxy p JOIN a_cohort_window c USING (session_hmac)
WHERE p.ts >= c.start_ts AND (c.end_ts IS NULL OR p.ts < c.end_ts)
UNION ALL BY NAME
SELECT w.stage, p.*
FROM proxy p
JOIN a_stages w ON p.ts >= w.start_ts AND (w.end_ts IS NULL OR p.ts < w.end_ts)
WHERE p.session_hmac IS NULL
   OR p.session_hmac NOT IN (SELECT session_hmac FROM a_sessions);

CREATE OR REPLACE TABLE a_stage_samples AS
WITH inbox_acc AS (
    SELECT c.stage, i.ts, i.session_hmac FROM inbox i JOIN a_cohort_window c USING (session_hmac)
    WHERE i.verdict = 'accepted' AND i.ts >= c.start_ts AND (c.end_ts IS NULL OR i.ts < c.end_ts)
    UNION ALL
    SELECT w.stage, i.ts, i.session_hmac FROM inbox i
    JOIN a_stages w ON i.ts >= w.start_ts AND (w.end_ts IS NULL OR i.ts < w.end_ts)
    WHERE i.verdict = 'accepted' AND i.session_hmac NOT IN (SELECT session_hmac FROM a_sessions)
),
completed AS (
    SELECT c.stage, s.ts, s.session_hmac FROM streams s JOIN a_cohort_window c USING (session_hmac)
    WHERE s.state = 'CLOSED' AND s.close_reason = 'completed'
      AND s.ts >= c.start_ts AND (c.end_ts IS NULL OR s.ts < c.end_ts)
    UNION ALL
    SELECT w.stage, s.ts, s.session_hmac FROM streams s
    JOIN a_stages w ON s.ts >= w.start_ts AND (w.end_ts IS NULL OR s.ts < w.end_ts)
    WHERE s.state = 'CLOSED' AND s.close_reason = 'completed'
      AND s.session_hmac NOT IN (SELECT session_hmac FROM a_sessions)
),
writes AS (
    SELECT c.stage, d.ts, d.session_hmac FROM dispatches d JOIN a_cohort_window c USING (session_hmac)
    WHERE d.tool_class IN ('write', 'paid')
      AND d.ts >= c.start_ts AND (c.end_ts IS NULL OR d.ts < c.end_ts)
    UNION ALL
    SELECT w.stage, d.ts, d.session_hmac FROM dispatches d
    JOIN a_stages w ON d.ts >= w.start_ts AND (w.end_ts IS NULL OR d.ts < w.end_ts)
    WHERE d.tool_class IN ('write', 'paid')
      AND (d.session_hmac IS NULL
           OR d.session_hmac NOT IN (SELECT session_hmac FROM a_sessions))
),
recoveries AS (
    SELECT c.stage, r.disc_ts AS ts, r.secs, r.session_hmac FROM a_recoveries r
    JOIN a_cohort_window c USING (session_hmac)
    WHERE r.reopen_ts IS NOT NULL
      AND r.disc_ts >= c.start_ts AND (c.end_ts IS NULL OR r.disc_ts < c.end_ts)
    UNION ALL
    SELECT w.stage, r.disc_ts, r.secs, r.session_hmac FROM a_recoveries r
    JOIN a_stages w ON r.disc_ts >= w.start_ts AND (w.end_ts IS NULL OR r.disc_ts < w.end_ts)
    WHERE r.reopen_ts IS NOT NULL
      AND r.session_hmac NOT IN (SELECT session_hmac FROM a_sessions)
),
facts AS (
    SELECT 'accepted_receipts' AS sample, stage, ts, NULL::DOUBLE AS secs, session_hmac
    FROM inbox_acc
    UNION ALL SELECT 'completed_streams', stage, ts, NULL, session_hmac FROM completed
    UNION ALL SELECT 'write_dispatches', stage, ts, NULL, session_hmac FROM writes
    UNION ALL SELECT 'recoveries', stage, ts, secs, session_hmac FROM recoveries
),
revised AS (
    -- Sessionless records can only come from the 2026-07-28 revision.
    SELECT f.*, max(f.ts) OVER (PARTITION BY f.sample, f.stage) AS last_ts_all,
           CASE WHEN f.session_hmac IS NULL THEN '2026-07-28'
                ELSE coalesce(a.protocol_version, 'unknown') END AS revision
    FROM facts f LEFT JOIN a_sessions a USING (session_hmac)
)
SELECT sample, stage, revision, count(*) AS n, min(ts) AS first_ts, max(ts) AS last_ts,
       count(*) FILTER (WHERE ts > last_ts_all - INTERVAL 1 HOUR) AS n_last_hour,
       quantile_cont(secs, 0.99) AS p99
FROM revised
GROUP BY GROUPING SETS ((sample, stage), (sample, stage, revision));

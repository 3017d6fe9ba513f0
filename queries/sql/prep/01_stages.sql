-- name: a_stages
-- purpose: one row per rollout stage of a release: scope, window (start to the release's
--          next start, or to this stage's rollback/complete), and the rollback hygiene
--          window if it was rolled back; a_stage_windows (the attribution keys of
--          macros.sql) and a_hygiene (the rollback hygiene windows: from the rollback until
--          the next start)
-- needs: rollout
-- A stage is scoped by its release: `stage` is the stage's key, its name alone when the
-- log names no release, else name@release; `stage_name` and `release` are its parts.
-- A stage started again (a retried step, a re-promotion) is judged from its latest start.
-- Its own rollback or completion at the very time of that start ends it (a controller
-- that aborts or promotes at once reports both at the same second); another stage's
-- start ends it only after it began.
-- Each bound is the nearest record in time (ASOF joins and a lead over the start times),
-- never a scan per stage: 100,000 stages take seconds, not hours.
CREATE OR REPLACE TABLE a_stages AS
WITH r AS (
    SELECT ts, file_id, pos, stage, action, scope, percent, release,
           release IS NULL AS no_release, coalesce(release, '') AS rel
    FROM rollout
),
starts AS (
    SELECT release, bool_or(no_release) AS no_release, rel,
           stage AS stage_name,
           CASE WHEN release IS NULL THEN stage ELSE stage || '@' || release END AS stage,
           max(ts) AS start_ts,
           arg_max(scope, (ts, file_id, pos)) FILTER (WHERE scope IS NOT NULL) AS scope,
           arg_max(percent, (ts, file_id, pos)) FILTER (WHERE percent IS NOT NULL) AS percent
    FROM r
    WHERE action = 'start'
    GROUP BY release, rel, stage
),
start_times AS (
    -- Per release, each start time and the next one after it.
    SELECT no_release, rel, ts, lead(ts) OVER (PARTITION BY no_release, rel ORDER BY ts) AS next_ts
    FROM (SELECT DISTINCT no_release, rel, ts FROM r WHERE action = 'start')
),
ends AS (
    SELECT no_release, rel, stage, ts FROM r WHERE action IN ('rollback', 'complete')
),
rollbacks AS (
    SELECT no_release, rel, stage, ts FROM r WHERE action = 'rollback'
),
bounded AS (
    SELECT s.*, n.next_ts, e.ts AS own_end, b.ts AS rollback_ts
    FROM starts s
    JOIN start_times n
      ON n.no_release = s.no_release AND n.rel = s.rel AND n.ts = s.start_ts
    ASOF LEFT JOIN ends e
      ON e.no_release = s.no_release AND e.rel = s.rel AND e.stage = s.stage_name
     AND e.ts >= s.start_ts
    ASOF LEFT JOIN rollbacks b
      ON b.no_release = s.no_release AND b.rel = s.rel AND b.stage = s.stage_name
     AND b.ts >= s.start_ts
),
any_start AS (
    SELECT DISTINCT ts FROM r WHERE action = 'start'
)
SELECT b.stage, b.start_ts, b.scope, b.percent,
       CASE WHEN b.next_ts IS NULL THEN b.own_end
            WHEN b.own_end IS NULL THEN b.next_ts
            ELSE least(b.next_ts, b.own_end) END AS end_ts,
       b.rollback_ts,
       h.ts AS hygiene_end,
       b.release, b.stage_name
FROM bounded b
ASOF LEFT JOIN any_start h ON h.ts > b.rollback_ts
ORDER BY b.start_ts, b.stage;

-- Windows of different releases may overlap; for records of no known session each window
-- is cut at the next start of any stage (with one release, or none, they are the same).
CREATE OR REPLACE TABLE a_stage_windows AS
SELECT stage_key(true, release_cohort(release)) AS key, stage, start_ts, end_ts
FROM a_stages WHERE release IS NOT NULL
UNION ALL
SELECT stage_key(true, stage_name), stage, start_ts, end_ts FROM a_stages
UNION ALL
SELECT stage_key(false, NULL), stage, start_ts,
       CASE WHEN next_start IS NULL THEN end_ts
            WHEN end_ts IS NULL THEN next_start
            ELSE least(end_ts, next_start) END
FROM (SELECT *, lead(start_ts) OVER (ORDER BY start_ts, stage) AS next_start FROM a_stages);

CREATE OR REPLACE TABLE a_hygiene AS
SELECT stage, rollback_ts AS t0, coalesce(hygiene_end, 'infinity'::TIMESTAMPTZ) AS t1
FROM a_stages
WHERE rollback_ts IS NOT NULL;

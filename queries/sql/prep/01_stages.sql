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
CREATE OR REPLACE TABLE a_stages AS
WITH starts AS (
    SELECT release,
           stage AS stage_name,
           CASE WHEN release IS NULL THEN stage ELSE stage || '@' || release END AS stage,
           max(ts) AS start_ts,
           arg_max(scope, (ts, file_id, pos)) FILTER (WHERE scope IS NOT NULL) AS scope,
           arg_max(percent, (ts, file_id, pos)) FILTER (WHERE percent IS NOT NULL) AS percent
    FROM rollout
    WHERE action = 'start'
    GROUP BY release, stage
),
bounded AS (
    SELECT s.*,
           (SELECT min(r.ts) FROM rollout r
             WHERE r.release IS NOT DISTINCT FROM s.release
               AND ((r.action = 'start' AND r.ts > s.start_ts)
                    OR (r.stage = s.stage_name AND r.action IN ('rollback', 'complete')
                        AND r.ts >= s.start_ts)))
               AS end_ts,
           (SELECT min(r.ts) FROM rollout r
             WHERE r.ts >= s.start_ts AND r.release IS NOT DISTINCT FROM s.release
               AND r.stage = s.stage_name AND r.action = 'rollback')
               AS rollback_ts
    FROM starts s
)
SELECT b.stage, b.start_ts, b.scope, b.percent, b.end_ts, b.rollback_ts,
       CASE WHEN rollback_ts IS NOT NULL THEN
           (SELECT min(r.ts) FROM rollout r WHERE r.action = 'start' AND r.ts > b.rollback_ts)
       END AS hygiene_end,
       b.release, b.stage_name
FROM bounded b
ORDER BY start_ts, stage;

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

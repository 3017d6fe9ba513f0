-- name: a_stages
-- purpose: one row per rollout stage: scope, window (start to the next start, or to this
--          stage's rollback/complete), and the rollback hygiene window if it was rolled back;
--          a_stage_windows (the attribution keys of macros.sql) and a_hygiene (the
--          rollback hygiene windows: from the rollback until the next start)
-- needs: rollout
CREATE OR REPLACE TABLE a_stages AS
WITH starts AS (
    SELECT stage,
           min(ts) AS start_ts,
           arg_min(scope, ts) FILTER (WHERE scope IS NOT NULL) AS scope,
           arg_min(percent, ts) FILTER (WHERE percent IS NOT NULL) AS percent
    FROM rollout
    WHERE action = 'start'
    GROUP BY stage
),
bounded AS (
    SELECT s.*,
           (SELECT min(r.ts) FROM rollout r
             WHERE r.ts > s.start_ts
               AND (r.action = 'start'
                    OR (r.stage = s.stage AND r.action IN ('rollback', 'complete')))) AS end_ts,
           (SELECT min(r.ts) FROM rollout r
             WHERE r.ts > s.start_ts AND r.stage = s.stage AND r.action = 'rollback')
               AS rollback_ts
    FROM starts s
)
SELECT b.*,
       CASE WHEN rollback_ts IS NOT NULL THEN
           (SELECT min(r.ts) FROM rollout r WHERE r.action = 'start' AND r.ts > b.rollback_ts)
       END AS hygiene_end
FROM bounded b
ORDER BY start_ts;

CREATE OR REPLACE TABLE a_stage_windows AS
SELECT stage_key(true, stage) AS key, stage, start_ts, end_ts FROM a_stages
UNION ALL
SELECT stage_key(false, NULL), stage, start_ts, end_ts FROM a_stages;

CREATE OR REPLACE TABLE a_hygiene AS
SELECT stage, rollback_ts AS t0, coalesce(hygiene_end, 'infinity'::TIMESTAMPTZ) AS t1
FROM a_stages
WHERE rollback_ts IS NOT NULL;

-- name: a_stages
-- purpose: one row per rollout stage: scope, window (start to the next start, or to this
--          stage's rollback/complete), and the rollback hygiene window if it was rolled back
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

-- name: a_stage_sources
-- purpose: per stage and record type, how many records fall in the stage's window: a gate
--          whose detectors' sources are all absent from the window judged nothing there
--          ("no data is never a pass"); a source with no record in a window has no row
-- needs: rollout
-- Every record of every source is paired with the windows that hold it and counted by a
-- number for its stage and one for its source, named after the counting: grouped by the
-- two names, the grouping of those pairs (26M at 10M events) was half of this step.
CREATE OR REPLACE TABLE a_stage_sources AS
WITH windows AS (
    SELECT row_number() OVER (ORDER BY stage) AS w, stage, start_ts, end_ts FROM a_stages
),
records AS (
    SELECT 1 AS source, ts FROM sessions
    UNION ALL SELECT 2, ts FROM streams
    UNION ALL SELECT 3, ts FROM events
    UNION ALL SELECT 4, ts FROM inbox
    UNION ALL SELECT 5, ts FROM dispatches
    UNION ALL SELECT 6, ts FROM proxy
    UNION ALL SELECT 7, ts FROM rollout
),
counts AS (
    SELECT w.w, r.source, count(*) AS n
    FROM windows w JOIN records r ON in_window(r.ts, w.start_ts, w.end_ts)
    GROUP BY ALL
)
SELECT w.stage,
       CASE c.source WHEN 1 THEN 'sessions' WHEN 2 THEN 'streams' WHEN 3 THEN 'events'
                     WHEN 4 THEN 'inbox' WHEN 5 THEN 'dispatches' WHEN 6 THEN 'proxy'
                     ELSE 'rollout' END AS source,
       c.n
FROM counts c JOIN windows w USING (w);

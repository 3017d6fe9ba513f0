-- name: a_stage_sources
-- purpose: per stage and record type, how many records fall in the stage's window: a gate
--          whose detectors' sources are all absent from the window judged nothing there
--          ("no data is never a pass"); a source with no record in a window has no row
-- needs: rollout
CREATE OR REPLACE TABLE a_stage_sources AS
WITH records AS (
    SELECT 'sessions' AS source, ts FROM sessions
    UNION ALL SELECT 'streams', ts FROM streams
    UNION ALL SELECT 'events', ts FROM events
    UNION ALL SELECT 'inbox', ts FROM inbox
    UNION ALL SELECT 'dispatches', ts FROM dispatches
    UNION ALL SELECT 'proxy', ts FROM proxy
    UNION ALL SELECT 'rollout', ts FROM rollout
)
SELECT w.stage, r.source, count(*) AS n
FROM a_stages w JOIN records r ON in_window(r.ts, w.start_ts, w.end_ts)
GROUP BY ALL;

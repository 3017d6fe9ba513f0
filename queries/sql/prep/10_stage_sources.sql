-- name: a_stage_sources
-- purpose: per stage and record type, how many records fall in the stage's window: a gate
--          whose detectors' sources are all absent from the window judged nothing there
--          ("no data is never a pass")
-- needs: rollout
CREATE OR REPLACE TABLE a_stage_sources AS
WITH w AS (
    SELECT stage, start_ts, coalesce(end_ts, 'infinity'::TIMESTAMPTZ) AS end_ts FROM a_stages
),
counted AS (
    SELECT 'sessions' AS source, w.stage, count(t.ts) AS n
    FROM w LEFT JOIN sessions t ON t.ts >= w.start_ts AND t.ts < w.end_ts GROUP BY ALL
    UNION ALL
    SELECT 'streams', w.stage, count(t.ts)
    FROM w LEFT JOIN streams t ON t.ts >= w.start_ts AND t.ts < w.end_ts GROUP BY ALL
    UNION ALL
    SELECT 'events', w.stage, count(t.ts)
    FROM w LEFT JOIN events t ON t.ts >= w.start_ts AND t.ts < w.end_ts GROUP BY ALL
    UNION ALL
    SELECT 'inbox', w.stage, count(t.ts)
    FROM w LEFT JOIN inbox t ON t.ts >= w.start_ts AND t.ts < w.end_ts GROUP BY ALL
    UNION ALL
    SELECT 'dispatches', w.stage, count(t.ts)
    FROM w LEFT JOIN dispatches t ON t.ts >= w.start_ts AND t.ts < w.end_ts GROUP BY ALL
    UNION ALL
    SELECT 'proxy', w.stage, count(t.ts)
    FROM w LEFT JOIN proxy t ON t.ts >= w.start_ts AND t.ts < w.end_ts GROUP BY ALL
    UNION ALL
    SELECT 'rollout', w.stage, count(t.ts)
    FROM w LEFT JOIN rollout t ON t.ts >= w.start_ts AND t.ts < w.end_ts GROUP BY ALL
)
SELECT stage, source, n FROM counted;

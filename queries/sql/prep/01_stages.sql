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

-- The stage windows as a lookup, so that a record finds the windows that hold its time
-- without being paired with every window of its key (quadratic in the stages: 100,000
-- stages of one release are 100,000 windows of one key). Per key, the windows' starts and
-- ends cut time into spans; a span is held by the same windows throughout, found by
-- `in_window` at its start (a window covers the spans from its start's to its end's:
-- linear in what the windows cover, never a join of windows with spans). a_stage_spans:
-- each span with each stage whose window holds it (one row with none for a gap); the
-- span from the last bound has no end.
CREATE OR REPLACE TABLE a_stage_spans AS
WITH bounds AS (
    SELECT key, t AS span_start, lead(t) OVER (PARTITION BY key ORDER BY t) AS span_end,
           row_number() OVER (PARTITION BY key ORDER BY t) AS n
    FROM (SELECT key, start_ts AS t FROM a_stage_windows
          UNION SELECT key, end_ts FROM a_stage_windows)
    WHERE key IS NOT NULL AND epoch_ms(t) IS NOT NULL  -- (an infinite time has no epoch)
),
covers AS (
    SELECT w.key, w.stage, w.start_ts, w.end_ts,
           unnest(range(a.n, coalesce(b.n, m.n + 1))) AS n
    FROM a_stage_windows w
    JOIN bounds a ON a.key = w.key AND a.span_start = w.start_ts
    LEFT JOIN bounds b ON b.key = w.key AND b.span_start = w.end_ts
    JOIN (SELECT key, max(n) AS n FROM bounds GROUP BY key) m ON m.key = w.key
)
SELECT s.key, s.span_start, s.span_end, c.stage
FROM bounds s
LEFT JOIN covers c
  ON c.key = s.key AND c.n = s.n AND in_window(s.span_start, c.start_ts, c.end_ts);

-- A record meets the spans by an equality: each key's time from its first bound is cut
-- into cells of equal width (the key's range over its number of spans, at least 1 ms),
-- and a span is listed in every cell it overlaps (a_stage_cells: about two per span in
-- all), so a record compares its time with the few spans of its cell (stage_attributed
-- in macros.sql). A time past the last cell is in the last (the span without an end).
CREATE OR REPLACE TABLE a_stage_grid AS
SELECT key, origin, width,
       (epoch_ms(last_start) - epoch_ms(origin)) // width AS last_cell
FROM (SELECT key, min(span_start) AS origin, max(span_start) AS last_start,
             greatest(1, (epoch_ms(max(span_start)) - epoch_ms(min(span_start)))
                         // count(DISTINCT span_start)) AS width
      FROM a_stage_spans GROUP BY key);

CREATE OR REPLACE TABLE a_stage_cells AS
SELECT s.key,
       unnest(range((epoch_ms(s.span_start) - epoch_ms(g.origin)) // g.width,
                    coalesce((epoch_ms(s.span_end) - epoch_ms(g.origin)) // g.width,
                             g.last_cell) + 1)) AS cell,
       s.span_start, s.span_end, s.stage
FROM a_stage_spans s JOIN a_stage_grid g USING (key);

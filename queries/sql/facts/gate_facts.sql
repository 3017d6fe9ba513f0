-- name: build
-- purpose: the gate facts: one row per unit a gate samples or fails (a delivered event, a
--          completed stream, a write dispatch, a recovery, a proxy record, an answer whose
--          size a proxy logged, a gated finding)
--          and per stage it is attributed to (stage_key in macros.sql; NULL for none), with
--          the dimensions the dashboard filters by. Every gate's measure, per stage for the
--          decision and under any filter for the dashboard, aggregates these facts
--          (queries/sql/gates); a_stage_samples (the evidence meters, the per-revision
--          samples) is its per-stage summary. Built after the detectors and their stages.
--          The units of `replaygate probe`'s sessions and requests (is_probe: its client
--          name, or its principal in a session or proxy row) are facts only where
--          `probe_gates` counts them: the facts of probe_facts and the findings of probe_detectors
--          (queries/params.py); the dashboard's measures and the meters follow.
--          A finding's `cause` is its detail.reason: the breakdown of a gate whose header
--          says `-- causes: true`.
--          Stored narrow: what a fact's session tells (its revision, server, client,
--          baseline) is kept once per session (a_gate_sessions, keyed by an integer `sid`)
--          and each unit names its session by that key (a unit of no known session keeps
--          its session_hmac, NULL or not, and sid NULL), in a table of the columns its
--          kind of unit has: a_gate_units (a record's unit: delivered events, completed
--          streams, sized answers), a_gate_details (a record's unit with a figure of its
--          own: write dispatches and their file, recoveries and their seconds),
--          a_gate_requests (a proxy
--          record: its status, method, origin, raw id, reconnect flag), a_gate_findings (a
--          gated finding: its detector and cause). What every reader reads is the table
--          macro gate_facts() (`setup`) that joins them back: a row per unit, as the one
--          table they were until 2026-12-03 (its rows of 18 columns were most of this
--          step's CPU: writing them; then one table of 14 columns, most of them NULL on
--          most rows, and writing those NULLs was half of the step at 10M events).
-- filters: none
-- What each known session tells the facts of its units, once per session. Its key is the
-- session's place in a_sessions as stored, in no particular order: it names a session only
-- inside the gate facts, which read it back as its session_hmac (gate_facts()), so no
-- result depends on which session has which key (numbered in the order of session_hmac,
-- the sort was 0.6 of the step's 1.2 CPU s at 10M events). An incremental analysis keeps
-- a session's key and numbers new sessions after the last (queries/incremental.py).
-- Its session_hmac stored uncompressed (each row's its own: DuckDB's string compression of
-- it was about half of writing the table at 10M events).
CREATE OR REPLACE TABLE a_gate_sessions (
    sid INTEGER,
    session_hmac VARCHAR USING COMPRESSION uncompressed,
    cohort VARCHAR,
    revision VARCHAR,
    server VARCHAR,
    client VARCHAR,
    baseline BOOLEAN,
    principal VARCHAR
);

INSERT INTO a_gate_sessions
SELECT (row_number() OVER ())::INTEGER AS sid, session_hmac, cohort,
       record_revision(session_hmac, protocol_version) AS revision,
       server_instance AS server, client_name AS client,
       is_baseline(session_hmac, cohort) AS baseline, principal
FROM a_sessions;

-- Whether a known session's units are `replaygate probe` units, decided once per session
-- before its units are joined with it: true (its client or principal is the probe's),
-- false (its principal is known and neither is), NULL where its principal is unknown and
-- a unit's own principal decides (is_probe(NULL, principal)). The same as is_probe(client,
-- coalesce(principal, a unit's principal)) on every unit; the join then carries a boolean,
-- not the client's and principal's text: at 100M events DuckDB holds the 5M sessions' text
-- compressed in the join's table and decompressed both for each of 131M units.
CREATE OR REPLACE TEMP MACRO session_probe(client, principal) AS
    CASE WHEN is_probe(client, principal) THEN true WHEN principal IS NOT NULL THEN false END;

-- A record's units (`tbl`, a CTE of their time `ts`, session_hmac, principal and the
-- columns a kind of unit has), each with its session's key (sid; NULL for a unit of no known
-- session), its stage and whether it is a `replaygate probe` unit (probe). Its stage grid is
-- looked up once per session (stage_grid in macros.sql: by the session's cohort, not per
-- unit); a unit of no known session takes the grid of a record of no known session. Each
-- is attributed its stage (stage_of in macros.sql: the windows looked up by the record's
-- time, linear in the stages). For a_gate_units and a_gate_details.
CREATE OR REPLACE TEMP MACRO gate_located(tbl) AS TABLE
WITH rg_sessions AS (
    SELECT sid, session_hmac, cohort, session_probe(client, principal) AS probe
    FROM a_gate_sessions
),
rg_gridded AS (FROM stage_grid(rg_sessions, true, cohort)),
rg_no_session AS (SELECT NULL::VARCHAR AS cohort),
rg_ungridded AS (FROM stage_grid(rg_no_session, false, cohort)),
rg_located AS (
    SELECT u.* EXCLUDE (principal), a.sid,
           CASE WHEN a.sid IS NULL THEN n.rg_key ELSE a.rg_key END AS rg_key,
           CASE WHEN a.sid IS NULL THEN n.rg_origin ELSE a.rg_origin END AS rg_origin,
           CASE WHEN a.sid IS NULL THEN n.rg_width ELSE a.rg_width END AS rg_width,
           CASE WHEN a.sid IS NULL THEN n.rg_last ELSE a.rg_last END AS rg_last,
           coalesce(a.probe, is_probe(NULL, u.principal)) AS probe
    FROM query_table(tbl) u LEFT JOIN rg_gridded a ON a.session_hmac = u.session_hmac
    CROSS JOIN rg_ungridded n
)
FROM stage_of(rg_located, ts);

-- A record's units that carry nothing but their kind (a_gate_units): fact, stage, time,
-- session. The fact is stored as an ENUM of the kinds of unit, a byte a row, and
-- gate_facts() reads it back as text (written as text, the column cost about 0.8 CPU s of
-- the step at 10M events; as an ENUM about 0.5). The units that carry a figure of their own
-- are kept apart (a_gate_details): here, where 14 million units are written at 10M events,
-- a column of them was a column of NULLs on all other rows, and writing the two cost 0.8 of
-- the step's 6-7 CPU s.
CREATE OR REPLACE TABLE a_gate_units AS
WITH units AS (
    -- delivered events: accepted receipts where the client keeps an inbox, else the
    -- events the server's log shows it sent or replayed (what the server basis judges).
    -- The receipts are stored once, as delivered events: no gate samples them apart.
    SELECT 'delivered_events' AS fact, ts, session_hmac, NULL::VARCHAR AS principal
    FROM inbox WHERE verdict = 'accepted'
    UNION ALL
    SELECT 'delivered_events', e.ts, e.session_hmac, NULL
    FROM events e
    WHERE e.kind <> 'priming' AND e.disposition IN ('sent', 'replayed')
      -- a session (and generation) without receipts: looked up among those the server
      -- judges (a_server_sessions, prepared: 238 of 507,380 at 10M events), which the join
      -- builds its table of (among the sessions with receipts, every event met a table of
      -- half a million: 0.45 CPU s more at 10M events; an ANTI JOIN built one of every
      -- event: 10M rows, a third of the step's 3 GB)
      AND (e.session_hmac IS NULL OR e.generation IS NULL
           OR (e.session_hmac, e.generation) IN (
                  SELECT (session_hmac, generation) FROM a_server_sessions))
    UNION ALL
    SELECT 'completed_streams', ts, session_hmac, NULL
    FROM streams WHERE is_completed(state, close_reason)
    UNION ALL
    -- answers a proxy log can judge by itself (lost_responses): POSTs answered with an
    -- event stream whose body size it logged, and for an empty one, that the client did
    -- not end the request
    SELECT 'sized_answers', ts, session_hmac, principal
    FROM proxy
    WHERE judged_event_stream(method, status, body_bytes_sent, resp_content_type, client_closed)
)
SELECT fact::ENUM('delivered_events', 'completed_streams', 'sized_answers') AS fact,
       stage, ts, sid, CASE WHEN sid IS NULL THEN session_hmac END AS session_hmac
FROM gate_located(units)
WHERE NOT probe OR list_contains($probe_facts, fact);

-- A record's units with a figure of their own (a_gate_details): fact, stage, time, session,
-- a recovery's seconds, a write dispatch's file (a gate leaves out the writes of a file its
-- detector was kept from).
CREATE OR REPLACE TABLE a_gate_details AS
WITH units AS (
    SELECT 'write_dispatches' AS fact, ts, session_hmac, NULL::DOUBLE AS secs, principal,
           file_id
    FROM dispatches WHERE is_write(tool_class)
    UNION ALL
    SELECT 'recoveries', disc_ts, session_hmac, secs, NULL, NULL
    FROM a_recoveries WHERE reopen_ts IS NOT NULL
)
SELECT fact::ENUM('write_dispatches', 'recoveries') AS fact,
       stage, ts, sid, CASE WHEN sid IS NULL THEN session_hmac END AS session_hmac, secs,
       file_id
FROM gate_located(units)
WHERE NOT probe OR list_contains($probe_facts, fact);

-- The proxy records (a_gate_requests, fact `proxy_records`): stage, time, session, status,
-- method, origin, raw id, whether it is a reconnect, its file.
CREATE OR REPLACE TABLE a_gate_requests AS
WITH located_proxy AS (
    SELECT p.ts, p.session_hmac, p.status, p.method, p.origin, p.raw_session_id, p.file_id,
           p.pos, p.last_event_id, a.sid, a.sid IS NOT NULL AS known, a.cohort,
           coalesce(a.probe, is_probe(NULL, p.principal)) AS probe
    FROM proxy p
    LEFT JOIN (SELECT session_hmac, sid, cohort, session_probe(client, principal) AS probe
               FROM a_gate_sessions) a ON a.session_hmac = p.session_hmac
),
-- A session's first GET in each stage it is counted in (reopens in macros.sql: a GET after
-- it re-opens the session's stream), from its GETs alone (a few in a hundred requests).
located_gets AS (
    SELECT p.ts, p.session_hmac, p.file_id, p.pos, a.sid IS NOT NULL AS known, a.cohort
    FROM proxy p LEFT JOIN a_gate_sessions a ON a.session_hmac = p.session_hmac
    WHERE p.method = 'GET' AND p.session_hmac IS NOT NULL
),
first_gets AS (
    SELECT stage, session_hmac, first_get(ts, file_id, pos) AS first_get
    FROM stage_attributed(located_gets, known, cohort, ts)
    GROUP BY ALL
),
proxied AS (
    SELECT * EXCLUDE (known, cohort) FROM stage_attributed(located_proxy, known, cohort, ts)
)
-- a GET after its session's first within the stage it is counted in re-opens
SELECT p.stage, p.ts, p.sid, CASE WHEN p.sid IS NULL THEN p.session_hmac END AS session_hmac,
       p.status, p.method, p.origin, p.raw_session_id,
       is_reconnect(p.method, p.last_event_id, p.status,
                    reopens(p.method, p.ts, p.file_id, p.pos, g.first_get)) AS reconnect,
       p.file_id
FROM proxied p
LEFT JOIN first_gets g
  ON p.method = 'GET' AND g.session_hmac = p.session_hmac
 AND g.stage IS NOT DISTINCT FROM p.stage
WHERE NOT p.probe OR list_contains($probe_facts, 'proxy_records');

-- The gated findings (a_gate_findings, fact `findings`): stage, time, session, detector,
-- cause.
CREATE OR REPLACE TABLE a_gate_findings AS
SELECT f.stage, f.ts, a.sid, CASE WHEN a.sid IS NULL THEN f.session_hmac END AS session_hmac,
       f.detector, json_extract_string(f.detail, '$.reason') AS cause
FROM findings f
LEFT JOIN a_gate_sessions a ON a.session_hmac = f.session_hmac
WHERE gated(f.detail)
  AND (NOT is_probe(a.client, a.principal) OR list_contains($probe_facts, 'findings')
       OR list_contains($probe_detectors, f.detector));

-- name: setup
-- purpose: per-connection macros (temporary, so a read-only connection works): the filter
--          predicate and the rows a gate's measure aggregates
-- filters: none
-- $flt is one STRUCT: stage, baseline (sessions outside every cohort), revs, servers,
-- clients, t_from, t_to. Empty lists and NULLs do not filter.
CREATE OR REPLACE TEMP MACRO rg_keep(stage, baseline, revision, server, client, ts, flt) AS
    (CASE WHEN coalesce(flt.baseline::BOOLEAN, false) THEN baseline
          ELSE flt.stage::VARCHAR IS NULL OR stage = flt.stage::VARCHAR END)
    AND (len(flt.revs::VARCHAR[]) = 0 OR list_contains(flt.revs::VARCHAR[], revision))
    AND (len(flt.servers::VARCHAR[]) = 0 OR list_contains(flt.servers::VARCHAR[], server))
    AND (len(flt.clients::VARCHAR[]) = 0 OR list_contains(flt.clients::VARCHAR[], client))
    AND (flt.t_from::TIMESTAMPTZ IS NULL OR ts >= flt.t_from::TIMESTAMPTZ)
    AND (flt.t_to::TIMESTAMPTZ IS NULL OR ts <= flt.t_to::TIMESTAMPTZ);

-- The gate facts, a row per unit with its session's dimensions (a unit of no known session:
-- its own session_hmac, the revision of a record of no known session, no server nor
-- client, not baseline): what every gate measure, the stage samples and the dashboard read.
-- Each kind of unit from its table, with NULL for the columns it has none of.
CREATE OR REPLACE TEMP MACRO gate_facts() AS TABLE
    SELECT u.fact, u.stage, u.ts, coalesce(a.session_hmac, u.session_hmac) AS session_hmac,
           u.secs, u.detector, u.status, u.method, u.origin, u.raw_session_id, u.reconnect,
           u.file_id, u.cause,
           CASE WHEN u.sid IS NULL THEN record_revision(u.session_hmac, NULL)
                ELSE a.revision END AS revision,
           a.server, a.client, coalesce(a.baseline, false) AS baseline
    FROM (SELECT fact::VARCHAR AS fact, stage, ts, sid, session_hmac, NULL::DOUBLE AS secs,
                 NULL::VARCHAR AS detector,
                 NULL::BIGINT AS status, NULL::VARCHAR AS method, NULL::VARCHAR AS origin,
                 NULL::BOOLEAN AS raw_session_id, NULL::BOOLEAN AS reconnect,
                 NULL::BIGINT AS file_id, NULL::VARCHAR AS cause
          FROM a_gate_units
          UNION ALL
          SELECT fact::VARCHAR, stage, ts, sid, session_hmac, secs, NULL, NULL, NULL, NULL,
                 NULL, NULL, file_id, NULL
          FROM a_gate_details
          UNION ALL
          SELECT 'proxy_records', stage, ts, sid, session_hmac, NULL, NULL, status, method,
                 origin, raw_session_id, reconnect, file_id, NULL
          FROM a_gate_requests
          UNION ALL
          SELECT 'findings', stage, ts, sid, session_hmac, NULL, detector, NULL, NULL, NULL,
                 NULL, NULL, NULL, cause
          FROM a_gate_findings) u
    LEFT JOIN a_gate_sessions a ON a.sid = u.sid;

-- The gate facts a measure aggregates, grouped by `k`: per stage (`by_stage`: every
-- stage has a row, one that is no fact when nothing happened in it), else the facts the
-- filter keeps as one group (k NULL).
CREATE OR REPLACE TEMP MACRO gate_rows(by_stage, flt) AS TABLE
    SELECT CASE WHEN by_stage THEN stage END AS k, fact, detector, ts, secs, session_hmac,
           status, method, origin, raw_session_id, reconnect, file_id, cause
    FROM gate_facts()
    WHERE CASE WHEN by_stage THEN stage IS NOT NULL
               ELSE rg_keep(stage, baseline, revision, server, client, ts, flt) END
    UNION ALL
    SELECT stage, 'none', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM a_stages WHERE by_stage
    UNION ALL
    SELECT NULL, 'none', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    WHERE NOT by_stage;

-- A gate fact that fails a gate: a finding of one of its detectors.
CREATE OR REPLACE TEMP MACRO fails(fact, detector, detectors) AS
    fact = 'findings' AND list_contains(detectors, detector);

-- A file whose units `dets`, a gate's detectors, could judge: not one a detector was kept
-- from (blind_files: it cannot show a fact the detector's verdict needs), whether or not
-- another file of its source can show that fact. Its units are no passing units: a gate
-- leaves them out of its sample, so a stage whose every unit is such is `insufficient`
-- (queries/gates.py), never a pass, and the sample does not grow when a file that shows
-- the fact is taken away (docs/detectors.md, "Left out of the sample").
CREATE OR REPLACE TEMP MACRO judged_file(fid, dets) AS
    fid NOT IN (SELECT b.file_id FROM blind_files b WHERE list_contains(dets, b.detector));

-- The units `detectors` returned undecided (cannot_tell_units, kept a row per unit and
-- stage, whatever `-- undecided:` label), each counted once, grouped by `k` as gate_rows
-- groups the facts: per stage, else those the filter keeps by the dimensions of the
-- unit's session and its time. A gate subtracts them from its sample: they are no
-- passing units. Like the facts, a unit of a `replaygate probe` session (is_probe, by the
-- session's client name or principal) counts only where `probe_gates` counts its
-- detector's findings (`probe_detectors`, queries/params.py): else it was never in the
-- sample it would be taken from.
CREATE OR REPLACE TEMP MACRO undecided_units(by_stage, flt, detectors, probe_detectors) AS TABLE
    SELECT CASE WHEN by_stage THEN u.stage END AS k,
           count(DISTINCT (u.detector, u.session_hmac, u.generation, u.stream_id, u.event_id,
                           u.dispatch_id, u.idempotency_key, u.ts)) AS n
    FROM cannot_tell_units u LEFT JOIN a_sessions a ON a.session_hmac = u.session_hmac
    WHERE list_contains(detectors, u.detector)
      AND (NOT is_probe(a.client_name, a.principal)
           OR list_contains(probe_detectors, u.detector))
      AND CASE WHEN by_stage THEN u.stage IS NOT NULL
               ELSE rg_keep(u.stage, is_baseline(a.session_hmac, a.cohort),
                            record_revision(u.session_hmac, a.protocol_version),
                            a.server_instance, a.client_name, u.ts, flt) END
    GROUP BY ALL;

-- name: samples
-- purpose: the samples behind the evidence meters (a_stage_samples), from the gate facts
--          as their readers read them (gate_facts(), `setup`)
-- filters: none
-- The samples behind the evidence meters per stage, and per stage and revision: counts,
-- the last hour before the stage's newest sample, and the p99 of recoveries.
CREATE OR REPLACE TABLE a_stage_samples AS
WITH staged AS (
    SELECT fact AS sample, stage, ts, secs, revision FROM gate_facts()
    WHERE stage IS NOT NULL
      AND fact IN ('delivered_events', 'completed_streams', 'write_dispatches', 'recoveries')
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

-- name: setup
-- purpose: per-connection macros of the dashboard's filter model: every record as
--          (stage, baseline, revision, server, client, ts) and one predicate that keeps it
-- Stage attribution, revision, reconnects and Origins are the shared macros of
-- prep/00_macros.sql; the filter itself (`rg_keep`) is the gate facts' (sql/facts).
-- A record of table `tbl` with its session's dimensions: revision, server, client and
-- baseline (a record of no known session has none but its revision).
CREATE OR REPLACE TEMP MACRO rg_dims(tbl) AS TABLE
    SELECT r.*, record_revision(r.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           is_baseline(a.session_hmac, a.cohort) AS baseline
    FROM query_table(tbl) r
    LEFT JOIN a_sessions a ON a.session_hmac = r.session_hmac;

-- The same with the stage attributed to it at its time `t_of` (a column of `tbl`).
CREATE OR REPLACE TEMP MACRO rg_staged(tbl, t_of) AS TABLE
    WITH rg_located AS (
        SELECT r.*, a.session_hmac IS NOT NULL AS rg_known, a.cohort AS rg_cohort
        FROM rg_dims(tbl) r
        LEFT JOIN a_sessions a ON a.session_hmac = r.session_hmac
    )
    SELECT * EXCLUDE (rg_known, rg_cohort)
    FROM stage_attributed(rg_located, rg_known, rg_cohort, t_of);

CREATE OR REPLACE TEMP MACRO rg_findings() AS TABLE
    SELECT f.*, a.principal
    FROM rg_dims(findings) f LEFT JOIN a_sessions a USING (session_hmac);

-- The stage of a proxy request is prepared (a_proxy_staged).
CREATE OR REPLACE TEMP MACRO rg_proxy() AS TABLE
    SELECT p.*, s.stage
    FROM rg_dims(proxy) p
    LEFT JOIN (SELECT file_id, pos, stage FROM a_proxy_staged) s USING (file_id, pos);

CREATE OR REPLACE TEMP MACRO rg_dispatches() AS TABLE SELECT * FROM rg_staged(dispatches, ts);

CREATE OR REPLACE TEMP MACRO rg_recoveries() AS TABLE
    SELECT *, disc_ts AS ts FROM rg_staged(a_recoveries, disc_ts);

CREATE OR REPLACE TEMP MACRO rg_streams() AS TABLE SELECT * FROM rg_staged(streams, ts);

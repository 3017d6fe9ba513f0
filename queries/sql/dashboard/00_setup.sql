-- name: setup
-- purpose: per-connection macros of the dashboard's filter model: every record as
--          (stage, baseline, revision, server, client, ts) and one predicate that keeps it
-- Stage attribution, revision, reconnects and Origins are the shared macros of
-- prep/00_macros.sql; the filter itself (`rg_keep`) is the gate facts' (sql/facts).
CREATE OR REPLACE TEMP MACRO rg_findings() AS TABLE
    SELECT f.*, record_revision(f.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           is_baseline(a.session_hmac, a.cohort) AS baseline,
           a.principal
    FROM findings f LEFT JOIN a_sessions a USING (session_hmac);

CREATE OR REPLACE TEMP MACRO rg_proxy() AS TABLE
    SELECT p.*, s.stage, record_revision(p.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           is_baseline(a.session_hmac, a.cohort) AS baseline
    FROM proxy p
    LEFT JOIN (SELECT file_id, pos, stage FROM a_proxy_staged) s USING (file_id, pos)
    LEFT JOIN a_sessions a USING (session_hmac);

CREATE OR REPLACE TEMP MACRO rg_dispatches() AS TABLE
    SELECT d.*, w.stage, record_revision(d.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           is_baseline(a.session_hmac, a.cohort) AS baseline
    FROM dispatches d
    LEFT JOIN a_sessions a ON a.session_hmac = d.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, d.ts);

CREATE OR REPLACE TEMP MACRO rg_recoveries() AS TABLE
    SELECT r.*, r.disc_ts AS ts, w.stage,
           record_revision(r.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           is_baseline(a.session_hmac, a.cohort) AS baseline
    FROM a_recoveries r
    LEFT JOIN a_sessions a ON a.session_hmac = r.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort,
                    r.disc_ts);

CREATE OR REPLACE TEMP MACRO rg_streams() AS TABLE
    SELECT s.*, w.stage, record_revision(s.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           is_baseline(a.session_hmac, a.cohort) AS baseline
    FROM streams s
    LEFT JOIN a_sessions a ON a.session_hmac = s.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, s.ts);

-- name: setup
-- purpose: per-connection macros of the dashboard's filter model: every record as
--          (stage, baseline, revision, server, client, ts) and one predicate that keeps it
-- Stage attribution, revision, reconnects and Origins are the shared macros of
-- prep/00_macros.sql; only the filter itself is defined here.
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

CREATE OR REPLACE TEMP MACRO rg_findings() AS TABLE
    SELECT f.*, record_revision(f.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           (a.session_hmac IS NOT NULL AND a.cohort IS NULL) AS baseline,
           a.principal
    FROM findings f LEFT JOIN a_sessions a USING (session_hmac);

CREATE OR REPLACE TEMP MACRO rg_proxy() AS TABLE
    SELECT p.*, s.stage, record_revision(p.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           (a.session_hmac IS NOT NULL AND a.cohort IS NULL) AS baseline
    FROM proxy p
    LEFT JOIN (SELECT file_id, pos, stage FROM a_proxy_staged) s USING (file_id, pos)
    LEFT JOIN a_sessions a USING (session_hmac);

CREATE OR REPLACE TEMP MACRO rg_dispatches() AS TABLE
    SELECT d.*, w.stage, record_revision(d.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           (a.session_hmac IS NOT NULL AND a.cohort IS NULL) AS baseline
    FROM dispatches d
    LEFT JOIN a_sessions a ON a.session_hmac = d.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, d.ts);

CREATE OR REPLACE TEMP MACRO rg_recoveries() AS TABLE
    SELECT r.*, r.disc_ts AS ts, w.stage,
           record_revision(r.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           (a.session_hmac IS NOT NULL AND a.cohort IS NULL) AS baseline
    FROM a_recoveries r
    LEFT JOIN a_sessions a ON a.session_hmac = r.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort,
                    r.disc_ts);

CREATE OR REPLACE TEMP MACRO rg_streams() AS TABLE
    SELECT s.*, w.stage, record_revision(s.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           (a.session_hmac IS NOT NULL AND a.cohort IS NULL) AS baseline
    FROM streams s
    LEFT JOIN a_sessions a ON a.session_hmac = s.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, s.ts);

CREATE OR REPLACE TEMP MACRO rg_inbox() AS TABLE
    SELECT i.*, w.stage, record_revision(i.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           (a.session_hmac IS NOT NULL AND a.cohort IS NULL) AS baseline
    FROM inbox i
    LEFT JOIN a_sessions a ON a.session_hmac = i.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, i.ts);

-- Events the server's log shows it sent or replayed, for sessions without client receipts
-- (the server basis of the cross-stream gate's sample, as in a_stage_samples).
CREATE OR REPLACE TEMP MACRO rg_server_delivered() AS TABLE
    SELECT e.*, w.stage, record_revision(e.session_hmac, a.protocol_version) AS revision,
           a.server_instance AS server, a.client_name AS client,
           (a.session_hmac IS NOT NULL AND a.cohort IS NULL) AS baseline
    FROM events e
    ANTI JOIN a_inbox_sessions x USING (session_hmac, generation)
    LEFT JOIN a_sessions a ON a.session_hmac = e.session_hmac
    LEFT JOIN a_stage_windows w
      ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, e.ts)
    WHERE e.kind <> 'priming' AND e.disposition IN ('sent', 'replayed');

-- name: a_sessions
-- purpose: one row per session: cohort, effective resumability, identity, end of life
-- needs: sessions
CREATE OR REPLACE TABLE a_sessions AS
SELECT session_hmac,
       min(generation) AS generation,
       arg_min(rollout_stage, (ts, file_id, pos)) FILTER (WHERE rollout_stage IS NOT NULL) AS stamped_stage,
       arg_min(release, (ts, file_id, pos)) FILTER (WHERE release IS NOT NULL) AS release,
       arg_min(principal, (ts, file_id, pos)) FILTER (WHERE principal IS NOT NULL) AS principal,
       arg_min(auth_subject, (ts, file_id, pos)) FILTER (WHERE auth_subject IS NOT NULL) AS auth_subject,
       arg_min(protocol_version, (ts, file_id, pos)) FILTER (WHERE protocol_version IS NOT NULL)
           AS protocol_version,
       arg_min(resumable, (ts, file_id, pos)) FILTER (WHERE resumable IS NOT NULL) AS resumable_field,
       arg_min(server_instance, (ts, file_id, pos)) FILTER (WHERE server_instance IS NOT NULL)
           AS server_instance,
       arg_min(client_name, (ts, file_id, pos)) FILTER (WHERE client_name IS NOT NULL) AS client_name,
       min(ts) AS first_ts,
       min(ts) FILTER (WHERE state IN ('TERMINATED', 'SESSION_EXPIRED')) AS terminal_ts,
       min(ts) FILTER (WHERE state = 'SESSION_EXPIRED') AS expired_ts,
       bool_or(state = 'TERMINATED') AS terminated
FROM sessions
GROUP BY session_hmac;

-- A session is resumable when it says so, or says nothing and negotiated a revision
-- that has resumption (detectors.md).
ALTER TABLE a_sessions ADD COLUMN resumable BOOLEAN;
UPDATE a_sessions SET resumable = coalesce(resumable_field, has_resumption(protocol_version));

-- The cohort key of stage_key (macros.sql): the release, when the rollout log names it.
ALTER TABLE a_sessions ADD COLUMN cohort VARCHAR;
UPDATE a_sessions SET cohort = CASE
    WHEN release IN (SELECT release FROM a_stages WHERE release IS NOT NULL)
        THEN release_cohort(release)
    ELSE stamped_stage END;

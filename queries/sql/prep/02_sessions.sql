-- name: a_sessions
-- purpose: one row per session: cohort, effective resumability, identity, end of life
-- needs: sessions
-- A session's stage, release, identity and revision are each the first non-NULL value of
-- its records (in time, then file and position: record_order). The grouping keeps no text:
-- eight arg_min over text held their values in the grouping's states, which went to disk
-- under a tenth of the memory at 10M events (x2 its time) and grew x14.6-21.7 from 10M to
-- 100M. It keeps, per session, the place of its first record and which of the eight
-- columns that record has (a bit each) against which any record has: where they agree (a
-- session whose first record carries all it will carry: every session of the simulated
-- fleets) the eight values are the first record's, read by its place (record_order is one
-- number per record); only the other sessions' records are grouped with the eight
-- arg_min, as before.
-- The session key and the token subject are stored uncompressed: each session's own (the
-- subject too in the simulated fleets), so DuckDB's string compression (FSST) of them was
-- most of writing the table, which grew x33 from 10M to 100M events (0.4 -> 12.5 operator
-- seconds); the other columns compress as DuckDB chooses.
CREATE OR REPLACE TABLE a_sessions (
    session_hmac VARCHAR USING COMPRESSION uncompressed,
    generation BIGINT,
    stamped_stage VARCHAR,
    release VARCHAR,
    principal VARCHAR,
    auth_subject VARCHAR USING COMPRESSION uncompressed,
    protocol_version VARCHAR,
    resumable_field BOOLEAN,
    server_instance VARCHAR,
    client_name VARCHAR,
    first_ts TIMESTAMPTZ,
    terminal_ts TIMESTAMPTZ,
    expired_ts TIMESTAMPTZ,
    terminated BOOLEAN,
    resumable BOOLEAN,
    cohort VARCHAR
);

INSERT INTO a_sessions
WITH s AS NOT MATERIALIZED (
    SELECT *, record_order(ts, file_id, pos) AS o,
           (rollout_stage IS NOT NULL)::INTEGER + 2 * (release IS NOT NULL)::INTEGER
           + 4 * (principal IS NOT NULL)::INTEGER + 8 * (auth_subject IS NOT NULL)::INTEGER
           + 16 * (protocol_version IS NOT NULL)::INTEGER
           + 32 * (resumable IS NOT NULL)::INTEGER
           + 64 * (server_instance IS NOT NULL)::INTEGER
           + 128 * (client_name IS NOT NULL)::INTEGER AS has
    FROM sessions
),
grouped AS MATERIALIZED (
    SELECT session_hmac,
           min(generation) AS generation,
           min(o) AS first_o,
           arg_min(has, o) AS first_has,
           bit_or(has) AS any_has,
           min(ts) AS first_ts,
           min(ts) FILTER (WHERE state IN ('TERMINATED', 'SESSION_EXPIRED')) AS terminal_ts,
           min(ts) FILTER (WHERE state = 'SESSION_EXPIRED') AS expired_ts,
           bool_or(state = 'TERMINATED') AS terminated
    FROM s
    GROUP BY session_hmac
),
-- a session whose first record has every column any of its records has
from_first AS (
    SELECT g.session_hmac, g.generation, s.rollout_stage AS stamped_stage, s.release,
           s.principal, s.auth_subject, s.protocol_version, s.resumable AS resumable_field,
           s.server_instance, s.client_name, g.first_ts, g.terminal_ts, g.expired_ts,
           g.terminated
    FROM grouped g
    JOIN s ON s.o = g.first_o
    WHERE g.first_has = g.any_has
),
-- the others: each column's first non-NULL value
by_column AS (
    SELECT session_hmac,
           min(generation) AS generation,
           arg_min(rollout_stage, o) FILTER (WHERE rollout_stage IS NOT NULL) AS stamped_stage,
           arg_min(release, o) FILTER (WHERE release IS NOT NULL) AS release,
           arg_min(principal, o) FILTER (WHERE principal IS NOT NULL) AS principal,
           arg_min(auth_subject, o) FILTER (WHERE auth_subject IS NOT NULL) AS auth_subject,
           arg_min(protocol_version, o) FILTER (WHERE protocol_version IS NOT NULL)
               AS protocol_version,
           arg_min(resumable, o) FILTER (WHERE resumable IS NOT NULL) AS resumable_field,
           arg_min(server_instance, o) FILTER (WHERE server_instance IS NOT NULL)
               AS server_instance,
           arg_min(client_name, o) FILTER (WHERE client_name IS NOT NULL) AS client_name,
           min(ts) AS first_ts,
           min(ts) FILTER (WHERE state IN ('TERMINATED', 'SESSION_EXPIRED')) AS terminal_ts,
           min(ts) FILTER (WHERE state = 'SESSION_EXPIRED') AS expired_ts,
           bool_or(state = 'TERMINATED') AS terminated
    FROM s
    SEMI JOIN (SELECT session_hmac FROM grouped WHERE first_has <> any_has) x
      ON x.session_hmac IS NOT DISTINCT FROM s.session_hmac
    GROUP BY session_hmac
)
SELECT session_hmac, generation, stamped_stage, release, principal, auth_subject,
       protocol_version, resumable_field, server_instance, client_name, first_ts, terminal_ts,
       expired_ts, terminated,
       -- A session is resumable when it says so, or says nothing and negotiated a revision
       -- that has resumption (detectors.md).
       coalesce(resumable_field, has_resumption(protocol_version)) AS resumable,
       -- The cohort key of stage_key (macros.sql): the release, when the rollout log names it.
       CASE WHEN release IN (SELECT release FROM a_stages WHERE release IS NOT NULL)
                THEN release_cohort(release)
            ELSE stamped_stage END AS cohort
FROM (SELECT * FROM from_first UNION ALL SELECT * FROM by_column);

-- name: a_blind_spans
-- purpose: partial blindness: each file of a record type that cannot show a fact another
--          file of that type shows (file_facts), with the time span of its rows. A unit
--          whose deciding evidence such a file could hold (blind_could_hold in
--          00_macros.sql) is `cannot_tell`, never a finding nor a pass: the file's rows
--          stay in the input, but cannot show the evidence. (A fact no file of the type
--          shows is the whole-source case: queries/capability.py.) Only the record types
--          whose facts a detector reads across files are spanned: one line each.
-- needs:
CREATE OR REPLACE TABLE a_blind_spans AS
WITH spans AS (
    SELECT 'proxy' AS tbl, file_id, min(ts) AS first_ts, max(ts) AS last_ts
    FROM proxy GROUP BY file_id
    UNION ALL
    SELECT 'sessions' AS tbl, file_id, min(ts) AS first_ts, max(ts) AS last_ts
    FROM sessions GROUP BY file_id
    UNION ALL
    SELECT 'dispatches' AS tbl, file_id, min(ts) AS first_ts, max(ts) AS last_ts
    FROM dispatches GROUP BY file_id
    UNION ALL
    SELECT 'streams' AS tbl, file_id, min(ts) AS first_ts, max(ts) AS last_ts
    FROM streams GROUP BY file_id
),
facts AS (
    SELECT s.tbl, s.file_id, ff.fact
    FROM spans s JOIN file_facts ff ON ff.file_id = s.file_id AND ff.fact LIKE s.tbl || '.%'
),
shown AS (SELECT DISTINCT tbl, fact FROM facts)
SELECT s.tbl, h.fact, s.file_id, f.path, s.first_ts, s.last_ts
FROM spans s
JOIN shown h ON h.tbl = s.tbl
JOIN files f ON f.file_id = s.file_id
ANTI JOIN facts x ON x.file_id = s.file_id AND x.fact = h.fact
UNION ALL
-- Who sent a proxy record: its principal, else its client address. A proxy log that shows
-- neither while another shows one names no client at all: its rows are nobody's in
-- particular (one fact, `proxy.principal|proxy.client_addr`, as a header spells either).
SELECT s.tbl, 'proxy.principal|proxy.client_addr' AS fact, s.file_id, f.path, s.first_ts,
       s.last_ts
FROM spans s
JOIN files f ON f.file_id = s.file_id
WHERE s.tbl = 'proxy'
  AND EXISTS (SELECT 1 FROM shown h
              WHERE h.tbl = 'proxy' AND h.fact IN ('proxy.principal', 'proxy.client_addr'))
  AND NOT EXISTS (SELECT 1 FROM facts x
                  WHERE x.file_id = s.file_id
                    AND x.fact IN ('proxy.principal', 'proxy.client_addr'));

-- The same for a fact of a session's own record (its ledger rows): the sessions with a
-- row in a sessions file that cannot show a fact another one shows. Where the session's
-- value is unknown, that file may have been where it went unrecorded.
CREATE OR REPLACE TABLE a_blind_sessions AS
SELECT DISTINCT s.session_hmac, b.fact, b.file_id, b.path
FROM sessions s JOIN a_blind_spans b ON b.file_id = s.file_id AND b.tbl = 'sessions';

-- A session that records neither resumable nor its revision counts as resumable; where its
-- ledger rows are in a file that cannot show them while others do, whether a cursor was
-- owed it cannot be told (priming_lost, resume_without_cursor): the file named is the
-- first such file by path.
CREATE OR REPLACE TABLE a_resumability_unknown AS
SELECT a.session_hmac, arg_min(b.file_id, b.path) AS file_id
FROM a_sessions a
JOIN a_blind_sessions b
  ON b.session_hmac = a.session_hmac
 AND b.fact IN ('sessions.resumable', 'sessions.protocol_version')
WHERE a.resumable_field IS NULL AND a.protocol_version IS NULL
GROUP BY ALL;

-- A session whose ledger names no token subject, with rows in a sessions file that cannot
-- show one while others do: its subject may have gone unrecorded there, so whether its
-- requests were served to the subject that opened it cannot be told
-- (auth_subject_mismatch; the auth_binding gate leaves its requests out of its sample).
CREATE OR REPLACE TABLE a_subject_unknown AS
SELECT a.session_hmac, arg_min(b.file_id, b.path) AS file_id
FROM a_sessions a
JOIN a_blind_sessions b ON b.session_hmac = a.session_hmac AND b.fact = 'sessions.auth_subject'
WHERE a.auth_subject IS NULL
GROUP BY ALL;

-- A window without an end (a dead session used at any time after its 404, a session
-- served at any time after it ended) is bounded by its client instead: only the client's
-- own requests can be on its session. Per proxy log that cannot show session ids while
-- another does, and per client it names (proxy_client; null: rows that name none, which
-- may be anyone's), the last request that may have been on a session (not a DELETE, not
-- an initialize it shows as one) and the last such one served (2xx). A session-id-less
-- row of the same client (or of none) after the unit's time, give or take
-- `blind_skew_ms`, may be that use: the unit is `cannot_tell` (reinit_missing's "used
-- after the 404", session_after_terminal).
CREATE OR REPLACE TABLE a_blind_clients AS
SELECT b.file_id, b.path, proxy_client(p.principal, p.client_addr, p.user_agent) AS client,
       max(p.ts) AS last_ts,
       max(p.ts) FILTER (WHERE p.status BETWEEN 200 AND 299) AS last_served_ts
FROM proxy p
JOIN a_blind_spans b ON b.file_id = p.file_id AND b.fact = 'proxy.session_hmac'
WHERE p.session_hmac IS NULL AND p.method <> 'DELETE'
  AND p.jsonrpc_method IS DISTINCT FROM 'initialize'
GROUP BY ALL;

-- The dispatches of a dispatch file that records no payload digest while another one does
-- (one producer's records with digests, another's without). Their own units are left out
-- as `cannot_tell` (the detectors' `-- facts:`), but an attempt in a file with digests may
-- be matched against one of them: whether the two carried the same payload cannot be
-- told, so such a unit is `cannot_tell` ("same payload"): duplicate_dispatch (a key's
-- repeat, a re-send), conflict_executed and idempotency_conflict (a key's other payloads).
CREATE OR REPLACE TABLE a_blind_dispatches AS
SELECT d.file_id, b.path, d.dispatch_id, d.ts, d.outcome, d.tool_name, d.tool_class,
       d.principal, d.session_hmac, d.generation, d.request_id, d.idempotency_key
FROM dispatches d
JOIN a_blind_spans b ON b.file_id = d.file_id AND b.fact = 'dispatches.payload_digest';

-- The streams with rows in a stream ledger file that cannot show a payload digest or a
-- stream's method while another file shows it (one server version records them, another
-- does not). Their own units are left out as `cannot_tell` (the detectors' `-- facts:`),
-- but a stream of another file may be compared with one of them: whether it re-POSTed the
-- same payload cannot be told, so such a unit is `cannot_tell` ("same payload"):
-- rollback_post_storm (a broken stream's re-POST). The file named is the first by path.
-- The payload digest is the stream's as the whole ledger gives it (a_streams keeps none):
-- its first non-NULL digest by record_order among its rows of every file, looked up among
-- the ledger rows of these streams' sessions alone, by the session key (a join on one key
-- lets DuckDB filter the scan of `streams` by those sessions) and between the least and the
-- greatest time of their streams' rows (a_streams' opened_ts, last_ts: DuckDB skips the
-- row groups outside by their zone maps). rollback_post_storm takes a blind stream's digest
-- from here: its own reads of `streams` leave these files out.
CREATE OR REPLACE TABLE a_blind_streams AS
WITH blind AS MATERIALIZED (
    SELECT a.session_hmac, a.generation, a.stream_id, a.opened_ts, a.last_ts, a.method,
           arg_min(b.file_id, b.path) AS file_id, min(b.path) AS path
    FROM streams s
    JOIN a_blind_spans b
      ON b.file_id = s.file_id AND b.fact IN ('streams.payload_digest', 'streams.method')
    JOIN a_streams a
      ON a.session_hmac = s.session_hmac AND a.generation = s.generation
     AND a.stream_id = s.stream_id
    GROUP BY ALL
),
digests AS (
    SELECT s.session_hmac, s.generation, s.stream_id,
           arg_min(s.payload_digest, record_order(s.ts, s.file_id, s.pos)) AS payload_digest
    FROM streams s
    SEMI JOIN (SELECT DISTINCT session_hmac FROM blind) k ON k.session_hmac = s.session_hmac
    WHERE s.payload_digest IS NOT NULL
      AND s.ts >= (SELECT min(opened_ts) FROM blind) AND s.ts <= (SELECT max(last_ts) FROM blind)
    GROUP BY ALL
)
SELECT b.session_hmac, b.generation, b.stream_id, b.opened_ts, b.method, d.payload_digest,
       b.file_id, b.path
FROM blind b
LEFT JOIN digests d
  ON d.session_hmac = b.session_hmac AND d.generation = b.generation
 AND d.stream_id = b.stream_id;

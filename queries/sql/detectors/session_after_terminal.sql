-- name: session_after_terminal
-- invariant: nothing is accepted or served on a session after it was terminated or expired
-- failure: A session keeps being served after DELETE or expiry: a stale node still has it, or
--   expiry is only enforced on some paths.
-- dashboard: Overview: the `auth_binding` gate fails; Sessions & proxy lists a `critical` row
--   per session.
-- fix: Make termination and expiry authoritative in the shared session store and check it on
--   every request and replay.
-- severity: critical
-- needs: sessions, inbox|proxy
-- facts: none
-- undecided: use after the end
-- unit: session_hmac
-- page: sessions
-- What was used on a session after its end: looked up by a 64-bit hash of the session
-- first (the ended sessions' hashes and ends are the hash table, an eighth of the width of
-- their keys), then the few rows found joined with their sessions by the full key, which
-- drops what a collision let through (every accepted receipt and served request joined with
-- every session by its 64-character key built a table of every session: it spilled at 10M
-- events under a tenth of the memory limit).
WITH used AS NOT MATERIALIZED (
    SELECT session_hmac, ts, 'receipt' AS what FROM inbox WHERE verdict = 'accepted'
    UNION ALL
    SELECT session_hmac, ts, 'request' AS what FROM proxy WHERE status BETWEEN 200 AND 299
),
maybe_late AS (
    SELECT u.* FROM used u
    SEMI JOIN (SELECT hash(session_hmac) AS h, terminal_ts FROM a_sessions
               WHERE terminal_ts IS NOT NULL) s
      ON hash(u.session_hmac) = s.h AND u.ts > s.terminal_ts
),
late AS (
    SELECT m.session_hmac, m.ts, m.what
    FROM maybe_late m
    JOIN (SELECT session_hmac, terminal_ts FROM a_sessions
          WHERE session_hmac IN (SELECT session_hmac FROM maybe_late)) s USING (session_hmac)
    WHERE m.ts > s.terminal_ts
),
-- The sessions that ended and that nothing seen was used on after their end.
ended AS NOT MATERIALIZED (
    SELECT session_hmac, terminal_ts FROM a_sessions
    WHERE terminal_ts IS NOT NULL AND session_hmac NOT IN (SELECT session_hmac FROM late)
),
-- A session's clients: who sent its own proxy records, and its ledger principal (once per
-- row naming them: the grouping below keeps each session once). Read by each use with the
-- blind clients it is joined with (a kept copy of every proxy record with a session, read
-- twice, spilled at 10M events under a tenth of the memory limit).
named AS NOT MATERIALIZED (
    SELECT session_hmac, proxy_client(principal, client_addr, user_agent) AS client
    FROM proxy WHERE session_hmac IS NOT NULL
    UNION ALL
    SELECT session_hmac, 'p:' || principal FROM a_sessions WHERE principal IS NOT NULL
),
-- The blind logs' rows that may be a session's: of one of its clients, joined on equality
-- (the few blind rows are the hash table), or naming no client (anyone's: one row per blind
-- log at most, paired with every ended session that has a client named, looked up for the
-- sessions those rows could hold: a session is paired once, not once per row naming it, which
-- the grouping below cannot tell apart). Not one join on `c.client = k.client OR
-- c.client IS NULL`: the disjunction left only the time to join on, every ended session's
-- clients paired with every blind client served after it (x36 from 10M to 100M events).
seen AS (
    SELECT k.session_hmac, c.file_id, c.path, c.last_served_ts
    FROM named k JOIN a_blind_clients c ON c.client = k.client
),
anyones AS (
    SELECT e.session_hmac, e.terminal_ts, c.file_id, c.path
    FROM ended e, (SELECT * FROM a_blind_clients WHERE client IS NULL) c
    WHERE epoch_ms(c.last_served_ts) >= epoch_ms(e.terminal_ts) - blind_skew_ms()
),
blind AS (
    SELECT e.session_hmac, e.terminal_ts, s.file_id, s.path
    FROM seen s JOIN ended e USING (session_hmac)
    WHERE epoch_ms(s.last_served_ts) >= epoch_ms(e.terminal_ts) - blind_skew_ms()
    UNION ALL
    SELECT * FROM anyones SEMI JOIN named USING (session_hmac)
)
SELECT session_hmac, 'critical' AS severity, min(ts) AS ts,
       json_object('accepted_receipts', count(*) FILTER (WHERE what = 'receipt'),
                   'served_requests', count(*) FILTER (WHERE what = 'request')) AS detail
FROM late
GROUP BY session_hmac
UNION ALL
-- "After its end" has no end in time, so the session's clients bound it (a_blind_clients):
-- a request of one of them (its ledger principal, or who sent its own proxy records), or
-- of a row naming no client, served after the end in a proxy log that cannot show session
-- ids while others do may have been on this session. Where nothing seen was served after
-- the end, that session is undecided, not a pass.
SELECT session_hmac, 'cannot_tell' AS severity, terminal_ts AS ts,
       json_object('missing', 'use after the end', 'file_id', arg_min(file_id, path)) AS detail
FROM blind
GROUP BY session_hmac, terminal_ts

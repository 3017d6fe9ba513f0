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
WITH late AS (
    SELECT i.session_hmac, i.ts, 'receipt' AS what
    FROM inbox i JOIN a_sessions s USING (session_hmac)
    WHERE i.verdict = 'accepted' AND i.ts > s.terminal_ts
    UNION ALL
    SELECT p.session_hmac, p.ts, 'request' AS what
    FROM proxy p JOIN a_sessions s USING (session_hmac)
    WHERE p.status BETWEEN 200 AND 299 AND p.ts > s.terminal_ts
),
-- The sessions that ended and that nothing seen was used on after their end.
ended AS (
    SELECT session_hmac, terminal_ts FROM a_sessions
    WHERE terminal_ts IS NOT NULL AND session_hmac NOT IN (SELECT session_hmac FROM late)
),
-- A session's clients: who sent its own proxy records, and its ledger principal (once per
-- row naming them: the grouping below keeps each session once).
named AS (
    SELECT session_hmac, proxy_client(principal, client_addr, user_agent) AS client
    FROM proxy WHERE session_hmac IS NOT NULL
    UNION ALL
    SELECT session_hmac, 'p:' || principal FROM a_sessions WHERE principal IS NOT NULL
),
-- The blind logs' rows that may be a session's: of one of its clients, joined on equality
-- (the few blind rows are the hash table), or naming no client (anyone's: one row per blind
-- log at most, paired with every session's). Not one join on `c.client = k.client OR
-- c.client IS NULL`: the disjunction left only the time to join on, every ended session's
-- clients paired with every blind client served after it (x36 from 10M to 100M events).
seen AS (
    SELECT k.session_hmac, c.file_id, c.path, c.last_served_ts
    FROM named k JOIN a_blind_clients c ON c.client = k.client
    UNION ALL
    SELECT k.session_hmac, c.file_id, c.path, c.last_served_ts
    FROM named k, (SELECT * FROM a_blind_clients WHERE client IS NULL) c
),
blind AS (
    SELECT e.session_hmac, e.terminal_ts, s.file_id, s.path
    FROM seen s JOIN ended e USING (session_hmac)
    WHERE epoch_ms(s.last_served_ts) >= epoch_ms(e.terminal_ts) - blind_skew_ms()
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

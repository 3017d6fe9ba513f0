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
)
SELECT session_hmac, 'critical' AS severity, min(ts) AS ts,
       json_object('accepted_receipts', count(*) FILTER (WHERE what = 'receipt'),
                   'served_requests', count(*) FILTER (WHERE what = 'request')) AS detail
FROM late
GROUP BY session_hmac

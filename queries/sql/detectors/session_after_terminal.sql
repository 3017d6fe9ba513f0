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
SELECT a.session_hmac, 'cannot_tell' AS severity, a.terminal_ts AS ts,
       json_object('missing', 'use after the end', 'file_id', arg_min(c.file_id, c.path))
           AS detail
FROM a_sessions a
JOIN (SELECT session_hmac, proxy_client(principal, client_addr, user_agent) AS client
      FROM proxy WHERE session_hmac IS NOT NULL
      UNION
      SELECT session_hmac, 'p:' || principal FROM a_sessions WHERE principal IS NOT NULL) k
  ON k.session_hmac = a.session_hmac
JOIN a_blind_clients c
  ON (c.client = k.client OR c.client IS NULL)
 AND epoch_ms(c.last_served_ts) >= epoch_ms(a.terminal_ts) - blind_skew_ms()
WHERE a.terminal_ts IS NOT NULL
  AND a.session_hmac NOT IN (SELECT session_hmac FROM late)
GROUP BY a.session_hmac, a.terminal_ts

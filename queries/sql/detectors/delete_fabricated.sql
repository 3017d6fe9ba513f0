-- name: delete_fabricated
-- invariant: a session is TERMINATED only after a DELETE on it succeeded (2xx)
-- failure: The server records a session as terminated although no DELETE succeeded (405, a lost
--   response, none sent): the ledger claims a clean end that did not happen.
-- dashboard: Sessions & proxy: a `medium` row per session; the inspector shows TERMINATED
--   without a 2xx DELETE.
-- fix: Write TERMINATED only when the DELETE was answered 2xx; record expiry as
--   SESSION_EXPIRED.
-- severity: medium
-- needs: sessions, proxy
-- facts: proxy.session_hmac
-- units: sessions WHERE state = 'TERMINATED' BY session_hmac
-- unit: session_hmac
-- page: sessions
SELECT s.session_hmac, 'medium' AS severity,
       min(s.ts) AS ts,
       json_object('delete_statuses',
                   (SELECT list(p.status ORDER BY p.ts) FROM proxy p
                     WHERE p.session_hmac = s.session_hmac AND p.method = 'DELETE')) AS detail
FROM sessions s
WHERE s.state = 'TERMINATED'
  AND NOT EXISTS (SELECT 1 FROM proxy p
                   WHERE p.session_hmac = s.session_hmac AND p.method = 'DELETE'
                     AND p.status BETWEEN 200 AND 299)
GROUP BY s.session_hmac

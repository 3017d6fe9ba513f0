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
-- undecided: proxy.session_hmac
-- unit: session_hmac
-- page: sessions
-- A DELETE is logged by a proxy between the session's first ledger row and its TERMINATED:
-- where a proxy log that cannot show session ids spans that time (partial blindness,
-- a_blind_spans), the DELETE may be there, so "no 2xx DELETE seen" is no evidence.
WITH t AS (
    SELECT s.session_hmac, min(s.ts) AS ts
    FROM sessions s
    WHERE s.state = 'TERMINATED'
      AND NOT EXISTS (SELECT 1 FROM proxy p
                       WHERE p.session_hmac = s.session_hmac AND p.method = 'DELETE'
                         AND p.status BETWEEN 200 AND 299)
    GROUP BY s.session_hmac
),
blind AS (
    SELECT t.session_hmac, arg_min(b.file_id, b.path) AS file_id
    FROM t JOIN a_sessions a USING (session_hmac)
    JOIN a_blind_spans b
      ON b.fact = 'proxy.session_hmac'
     AND blind_could_hold(b.first_ts, b.last_ts, epoch_ms(a.first_ts), epoch_ms(t.ts))
    GROUP BY t.session_hmac
)
SELECT t.session_hmac, 'medium' AS severity, t.ts,
       json_object('delete_statuses',
                   (SELECT list(p.status ORDER BY p.ts, p.file_id, p.pos) FROM proxy p
                     WHERE p.session_hmac = t.session_hmac AND p.method = 'DELETE')) AS detail
FROM t ANTI JOIN blind USING (session_hmac)
UNION ALL
SELECT t.session_hmac, 'cannot_tell' AS severity, t.ts,
       json_object('missing', 'proxy.session_hmac', 'file_id', b.file_id) AS detail
FROM t JOIN blind b USING (session_hmac)

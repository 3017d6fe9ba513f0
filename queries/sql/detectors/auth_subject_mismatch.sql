-- name: auth_subject_mismatch
-- invariant: a session is served only to the token subject that opened it
-- failure: A request on a session carries another token subject and is served: a session id
--   alone authorizes access.
-- dashboard: Overview: the `auth_binding` gate fails; Sessions & proxy lists a `critical` row
--   per (session, subject).
-- fix: Bind sessions to the token subject that created them and answer a different subject with
--   403 or 404.
-- severity: critical
-- needs: sessions, proxy
-- facts: proxy.auth_subject, sessions.auth_subject
-- units: proxy WHERE session_hmac IS NOT NULL AND status BETWEEN 200 AND 299 BY session_hmac
-- undecided: sessions.auth_subject
-- unit: (session_hmac, auth_subject)
-- page: sessions
SELECT p.session_hmac, 'critical' AS severity, min(p.ts) AS ts,
       json_object('auth_subject', p.auth_subject, 'session_subject', min(s.auth_subject),
                   'requests', count(*)) AS detail
FROM proxy p JOIN a_sessions s USING (session_hmac)
WHERE p.auth_subject IS NOT NULL AND s.auth_subject IS NOT NULL
  AND p.auth_subject <> s.auth_subject AND p.status BETWEEN 200 AND 299
GROUP BY p.session_hmac, p.auth_subject
UNION ALL
-- A session whose subject a blind ledger file may hide (a_subject_unknown): its served
-- requests are undecided, not a pass.
SELECT p.session_hmac, 'cannot_tell' AS severity, min(p.ts) AS ts,
       json_object('missing', 'sessions.auth_subject', 'file_id', b.file_id) AS detail
FROM proxy p
JOIN a_subject_unknown b USING (session_hmac)
WHERE p.auth_subject IS NOT NULL AND p.status BETWEEN 200 AND 299
GROUP BY p.session_hmac, b.file_id

-- name: auth_binding
-- title: Auth binding
-- kind: count
-- detectors: auth_subject_mismatch, session_after_terminal
-- min_sample: 0
-- sample: requests on a session
-- unit: auth-binding violations
-- unit_one: auth-binding violation
-- params: detectors
-- measure: count of auth_subject_mismatch and session_after_terminal findings; sample: proxy requests on a session
SELECT w.stage,
       (SELECT count(*) FROM findings f WHERE f.stage = w.stage
           AND list_contains($detectors, f.detector)) AS value,
       (SELECT count(*) FROM a_proxy_staged p
         WHERE p.stage = w.stage AND p.session_hmac IS NOT NULL) AS sample
FROM a_stages w

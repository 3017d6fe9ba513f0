-- name: auth_binding
-- measure: count of auth_subject_mismatch and session_after_terminal findings; sample: proxy requests on a session
SELECT w.stage,
       (SELECT count(*) FROM findings f WHERE f.stage = w.stage
           AND f.detector IN ('auth_subject_mismatch', 'session_after_terminal')) AS value,
       (SELECT count(*) FROM a_proxy_staged p
         WHERE p.stage = w.stage AND p.session_hmac IS NOT NULL) AS sample
FROM a_stages w

-- name: auth_binding
-- title: Auth binding
-- page: sessions
-- kind: count
-- detectors: auth_subject_mismatch, session_after_terminal
-- min_sample: 0
-- sample: requests on a session
-- unit: auth-binding violations
-- unit_one: auth-binding violation
-- params: by_stage, flt, detectors
-- measure: count of auth_subject_mismatch and session_after_terminal findings; sample: proxy requests on a session
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = 'proxy_records' AND session_hmac IS NOT NULL) AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

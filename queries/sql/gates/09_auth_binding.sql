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
-- measure: count of auth_subject_mismatch and session_after_terminal findings; sample: proxy requests on a session its detectors could judge (not those of a log that cannot show token subjects, nor of a session whose subject a blind ledger file may hide)
-- The sample is the requests its detectors could judge: not those of a proxy log a
-- detector was kept from (one that cannot show token subjects, whether or not another
-- does: judged_file in gate_facts.sql), nor those of a session whose subject a blind
-- ledger file may hide (a_subject_unknown): a request nobody could compare is no passing
-- request.
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = 'proxy_records' AND session_hmac IS NOT NULL
                          AND judged_file(file_id, $detectors)
                          AND session_hmac NOT IN (SELECT session_hmac FROM a_subject_unknown))
           AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

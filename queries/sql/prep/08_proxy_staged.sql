-- name: a_proxy_staged
-- purpose: proxy records with the stage the gates count them in (stage_key in macros.sql)
-- needs: rollout, proxy
CREATE OR REPLACE TABLE a_proxy_staged AS
SELECT w.stage, p.*
FROM proxy p
LEFT JOIN a_sessions a ON a.session_hmac = p.session_hmac
JOIN a_stage_windows w
  ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, p.ts);

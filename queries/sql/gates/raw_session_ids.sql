-- name: raw_session_ids
-- measure: proxy records that carried a raw session id; sample: proxy records
SELECT w.stage, count(p.stage) FILTER (WHERE p.raw_session_id) AS value,
       count(p.stage) AS sample
FROM a_stages w LEFT JOIN a_proxy_staged p USING (stage)
GROUP BY w.stage

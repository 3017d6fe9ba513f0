-- name: raw_session_ids
-- title: Raw session ids in logs
-- kind: count
-- detectors: raw_session_id_logged
-- min_sample: 0
-- sample: proxy records
-- unit: raw session ids in logs
-- unit_one: raw session id in logs
-- measure: proxy records that carried a raw session id; sample: proxy records
SELECT w.stage, count(p.stage) FILTER (WHERE p.raw_session_id) AS value,
       count(p.stage) AS sample
FROM a_stages w LEFT JOIN a_proxy_staged p USING (stage)
GROUP BY w.stage

-- name: raw_session_ids
-- title: Raw session ids in logs
-- page: sessions
-- kind: count
-- detectors: raw_session_id_logged
-- min_sample: 0
-- sample: proxy records
-- unit: raw session ids in logs
-- unit_one: raw session id in logs
-- measure: proxy records that carried a raw session id; sample: proxy records
-- params: by_stage, flt
SELECT k AS stage, count(*) FILTER (WHERE fact = 'proxy_records' AND raw_session_id) AS value,
       count(*) FILTER (WHERE fact = 'proxy_records') AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k

-- name: stages
-- purpose: the rollout stages with their windows, oldest first
-- filters: none
SELECT stage, scope, percent, start_ts, end_ts, rollback_ts, hygiene_end
FROM a_stages ORDER BY start_ts, stage;

-- name: rollout_actions
-- purpose: every rollout action, oldest first
-- filters: none
SELECT ts, stage, action, scope, percent, note FROM rollout ORDER BY ALL;

-- name: filter_values
-- purpose: the values the revision, server and client filters offer
-- filters: none
SELECT 'revision' AS dim, revision AS value FROM (
    SELECT DISTINCT record_revision(session_hmac, protocol_version) AS revision FROM a_sessions
    UNION SELECT sessionless_revision()
    WHERE EXISTS (SELECT 1 FROM dispatches WHERE session_hmac IS NULL))
UNION ALL
SELECT DISTINCT 'server', server_instance FROM a_sessions WHERE server_instance IS NOT NULL
UNION ALL
SELECT DISTINCT 'client', client_name FROM a_sessions WHERE client_name IS NOT NULL
ORDER BY 1, 2;

-- name: data_span
-- purpose: the first and last timestamp of the proxy log and the session ledger
-- filters: none
SELECT min(ts) AS first_ts, max(ts) AS last_ts
FROM (SELECT ts FROM proxy UNION ALL SELECT ts FROM sessions);

-- name: freshness
-- purpose: the newest record of each source, and when the last file was ingested
-- filters: none
SELECT 'session ledger' AS source, max(ts) AS newest, count(*) AS records FROM sessions
UNION ALL SELECT 'stream ledger', max(ts), count(*) FROM streams
UNION ALL SELECT 'server events', max(ts), count(*) FROM events
UNION ALL SELECT 'client receipts', max(ts), count(*) FROM inbox
UNION ALL SELECT 'dispatch records', max(ts), count(*) FROM dispatches
UNION ALL SELECT 'proxy log', max(ts), count(*) FROM proxy
UNION ALL SELECT 'rollout log', max(ts), count(*) FROM rollout
UNION ALL SELECT 'last ingest', max(ingested_at), count(*) FROM files;

-- name: findings
-- purpose: findings with the session's revision, server and client; worst and newest first
-- params: flt, dets
-- filters: stage, revision, server, client, time
SELECT detector, severity, ts, stage, baseline, session_hmac, generation, stream_id,
       event_id, dispatch_id, idempotency_key, detail, revision, server, client, principal
FROM rg_findings()
WHERE rg_keep(stage, baseline, revision, server, client, ts, $flt)
  AND (len($dets::VARCHAR[]) = 0 OR list_contains($dets::VARCHAR[], detector))
ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'high' THEN 1
         WHEN 'medium' THEN 2 ELSE 3 END, ts DESC, detector,
         -- then the unit, so findings of one detector and millisecond keep one order
         session_hmac, generation, stream_id, event_id, dispatch_id, idempotency_key,
         CAST(detail AS VARCHAR);

-- name: finding_summary
-- purpose: per detector: findings, worst severity, newest; worst first
-- params: flt, dets
-- filters: stage, revision, server, client, time
WITH f AS (
    SELECT detector, ts, severity,
           CASE severity WHEN 'critical' THEN 0 WHEN 'high' THEN 1
                WHEN 'medium' THEN 2 ELSE 3 END AS rank
    FROM rg_findings()
    WHERE rg_keep(stage, baseline, revision, server, client, ts, $flt)
      AND (len($dets::VARCHAR[]) = 0 OR list_contains($dets::VARCHAR[], detector))
)
SELECT detector, count(*) AS findings, arg_min(severity, rank) AS worst, max(ts) AS newest
FROM f GROUP BY detector
ORDER BY min(rank), findings DESC, newest DESC, detector;

-- name: gated_counts
-- purpose: per detector, the findings that count in gates (gated() in macros.sql)
-- params: flt
-- filters: stage, revision, server, client, time
SELECT detector, count(*) AS n
FROM rg_findings()
WHERE rg_keep(stage, baseline, revision, server, client, ts, $flt) AND gated(detail)
GROUP BY detector;

-- name: findings_over_time
-- purpose: findings per bucket and detector
-- params: flt, dets, bucket
-- filters: stage, revision, server, client, time
SELECT time_bucket($bucket::INTERVAL, ts) AS bucket, detector, count(*) AS n
FROM rg_findings()
WHERE rg_keep(stage, baseline, revision, server, client, ts, $flt)
  AND list_contains($dets::VARCHAR[], detector)
GROUP BY ALL ORDER BY ALL;  -- a bucket's rows in one order too (a chart's traces follow it)

-- name: recoveries
-- purpose: seconds from each DISCONNECTED to the STREAM_OPEN that ended it
-- params: flt
-- filters: stage, revision, server, client, time
SELECT disc_ts, secs, retry_ms FROM rg_recoveries()
WHERE reopen_ts IS NOT NULL AND rg_keep(stage, baseline, revision, server, client, ts, $flt);

-- name: stream_states_over_time
-- purpose: disconnects, resumes and rejected cursors per bucket
-- params: flt, bucket
-- filters: stage, revision, server, client, time
SELECT time_bucket($bucket::INTERVAL, ts) AS bucket, state, count(*) AS n
FROM rg_streams()
WHERE state IN ('DISCONNECTED', 'RESUME_PENDING', 'CURSOR_REJECTED')
  AND rg_keep(stage, baseline, revision, server, client, ts, $flt)
GROUP BY ALL ORDER BY ALL;  -- a bucket's rows in one order too (a chart's traces follow it)

-- name: dispatch_mix
-- purpose: dispatches per bucket, outcome, revision and tool class
-- params: flt, bucket
-- filters: stage, revision, server, client, time
SELECT time_bucket($bucket::INTERVAL, ts) AS bucket, outcome, revision, tool_class,
       idempotency_key IS NOT NULL AS keyed, count(*) AS n
FROM rg_dispatches()
WHERE rg_keep(stage, baseline, revision, server, client, ts, $flt)
GROUP BY ALL ORDER BY ALL;  -- a bucket's rows in one order too (a chart's traces follow it)

-- name: proxy_status
-- purpose: proxy requests per bucket and status class
-- params: flt, bucket
-- filters: stage, revision, server, client, time
SELECT time_bucket($bucket::INTERVAL, ts) AS bucket, (status // 100) || 'xx' AS class,
       count(*) AS n
FROM rg_proxy()
WHERE rg_keep(stage, baseline, revision, server, client, ts, $flt)
GROUP BY ALL ORDER BY ALL;  -- a bucket's rows in one order too (a chart's traces follow it)

-- name: reconnects
-- purpose: reconnects per second in each 10-second window of the reconnect budget (the
--          reconnect_qps gate's facts: GET with Last-Event-ID, cursor-less GET re-opens on a
--          session, 429, 503)
-- params: flt
-- filters: stage, revision, server, client, time
SELECT reconnect_window_start(reconnect_window(ts)) AS win,
       count(*) / reconnect_window_s() AS qps
FROM gate_rows(false, $flt)
WHERE fact = 'proxy_records' AND reconnect
GROUP BY ALL ORDER BY win;

-- name: inspector_subjects
-- purpose: what the inspector can open: sessions with findings (client, start, stage, count)
--          and sessionless findings by principal, request id or idempotency key
-- params: flt, limit
-- filters: stage, revision, server, client, time
WITH f AS (SELECT * FROM rg_findings()
           WHERE rg_keep(stage, baseline, revision, server, client, ts, $flt))
SELECT 'session' AS subject_type, f.session_hmac AS subject, count(*) AS findings,
       list(DISTINCT f.detector ORDER BY f.detector) AS detectors, min(a.client_name) AS client,
       min(a.first_ts) AS started, min(coalesce(a.cohort, 'baseline')) AS stage,
       min(f.ts) AS first
FROM f JOIN a_sessions a USING (session_hmac)
GROUP BY f.session_hmac
UNION ALL
SELECT CASE WHEN idempotency_key IS NOT NULL THEN 'key'
            WHEN dispatch_id IS NOT NULL THEN 'dispatch' ELSE 'principal' END,
       coalesce(idempotency_key, dispatch_id, principal, detector), count(*),
       list(DISTINCT detector ORDER BY detector), NULL, min(ts), min(stage), min(ts)
FROM f WHERE session_hmac IS NULL OR session_hmac NOT IN (SELECT session_hmac FROM a_sessions)
GROUP BY ALL
-- a subject is one row: ties in count and first finding listed by it, so the same ones are kept
ORDER BY findings DESC, first, subject_type, subject
LIMIT $limit;

-- name: session_timeline
-- purpose: one session (or one of its streams) as rows of (ts, lane, label, kind, detail)
-- params: s, stream
-- filters: none
SELECT ts, 'session ledger' AS lane, state AS label, state AS kind, NULL AS stream_id,
       NULL::BIGINT AS seq, NULL AS event_id, NULL AS cursor, 'generation ' || generation AS info
FROM sessions WHERE session_hmac = $s
UNION ALL
SELECT ts, 'stream ledger', state, state, stream_id, NULL, last_sent_event_id,
       resume_from_event_id,
       concat_ws(' ', 'stream ' || stream_id, close_reason)
FROM streams WHERE session_hmac = $s AND ($stream IS NULL OR stream_id = $stream)
UNION ALL
SELECT ts, 'server events', kind || ' #' || seq, disposition, stream_id, seq, event_id, NULL,
       'stream ' || stream_id
FROM events WHERE session_hmac = $s AND ($stream IS NULL OR stream_id = $stream)
UNION ALL
SELECT ts, 'client receipts', coalesce(kind, 'event') || ' #' || coalesce(seq::VARCHAR, '?'),
       verdict, stream_id, seq, event_id, NULL,
       'arrived on ' || stream_id || ', from ' || coalesce(origin_stream_id, '?')
-- the receipts as the analysis reads them (a_inbox, queries/sql/prep/04_inbox.sql)
FROM (SELECT ts, stream_id, event_id, verdict, origin_stream_id, seq, kind
      FROM inbox WHERE session_hmac = $s AND receipt_placed(origin_stream_id, seq, kind)
      UNION ALL
      SELECT ts, stream_id, event_id, verdict, origin_stream_id, seq, kind
      FROM a_inbox_resolved WHERE session_hmac = $s)
WHERE $stream IS NULL OR stream_id = $stream
UNION ALL
SELECT ts, 'proxy requests', method || ' ' || status, 'http ' || (status // 100) || 'xx',
       NULL, NULL, NULL, last_event_id, concat_ws(' ', jsonrpc_method, origin)
FROM proxy WHERE session_hmac = $s
UNION ALL
SELECT ts, 'dispatches', tool_name || ' ' || outcome, outcome, NULL, NULL, NULL, NULL,
       concat_ws(' ', dispatch_id, 'key ' || idempotency_key)
FROM dispatches WHERE session_hmac = $s
ORDER BY ALL;  -- records of one millisecond in one order too

-- name: sessionless_timeline
-- purpose: records without a known session, tied by principal, request id or idempotency
--          key, or (with $at) every such record within 5 seconds of a moment
-- params: subject, at
-- filters: none
WITH near AS (
    SELECT $at::TIMESTAMPTZ - INTERVAL 5 SECOND AS t0, $at::TIMESTAMPTZ + INTERVAL 5 SECOND AS t1
)
SELECT ts, 'proxy requests' AS lane, method || ' ' || status AS label,
       'http ' || (status // 100) || 'xx' AS kind, NULL AS stream_id, NULL::BIGINT AS seq,
       NULL AS event_id, last_event_id AS cursor,
       concat_ws(' ', jsonrpc_method, 'request ' || request_id, 'Origin ' || origin) AS info
FROM proxy, near
WHERE (session_hmac IS NULL OR session_hmac NOT IN (SELECT session_hmac FROM a_sessions))
  AND (principal = $subject OR request_id = $subject OR ts BETWEEN near.t0 AND near.t1)
UNION ALL
SELECT ts, 'dispatches', tool_name || ' ' || outcome, outcome, NULL, NULL, NULL, NULL,
       concat_ws(' ', dispatch_id, 'key ' || idempotency_key, 'request ' || request_id)
FROM dispatches, near
WHERE idempotency_key = $subject OR dispatch_id = $subject OR principal = $subject
   OR request_id = $subject
   OR (session_hmac IS NULL AND ts BETWEEN near.t0 AND near.t1)
ORDER BY ALL;  -- records of one millisecond in one order too

-- name: streams_of
-- purpose: the streams of one session
-- params: s
-- filters: none
SELECT DISTINCT stream_id FROM streams WHERE session_hmac = $s ORDER BY 1;

-- name: files
-- purpose: the ingested files
-- filters: none
SELECT path, format, compression, size, rows_loaded, rows_quarantined, ingested_at, status, sha256
FROM files ORDER BY file_id;

-- name: quarantine
-- purpose: quarantined rows (the first 5,000)
-- filters: none
SELECT path, line, "row", record_type, reason FROM quarantine
ORDER BY path, line, "row" LIMIT 5000;

-- name: coverage
-- purpose: what each detector could judge
-- filters: none
SELECT detector, status, rows, seconds FROM coverage ORDER BY detector;

-- name: cannot_tell
-- purpose: units a detector could not judge: the file, the fact it cannot show, and how
--          many of the units belong to each rollout stage (cannot_tell_stages)
-- filters: none
SELECT t.detector, t.file, t.missing AS cannot_show, t.units,
       coalesce(string_agg(s.stage || ': ' || s.units, ', ' ORDER BY s.stage), '') AS by_stage
FROM cannot_tell t
LEFT JOIN cannot_tell_stages s USING (detector, file, missing)
GROUP BY t.detector, t.file, t.missing, t.units
ORDER BY t.detector, t.file, t.missing;

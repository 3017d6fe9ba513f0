-- name: a_inbox
-- purpose: receipts with origin stream, seq and kind resolved through the event log
--          when the client did not record them (only those rows are joined)
-- needs: inbox
CREATE OR REPLACE TABLE a_inbox AS
SELECT ts, session_hmac, generation, stream_id, event_id, verdict, dispatch_id,
       origin_stream_id, seq, kind
FROM inbox
WHERE origin_stream_id IS NOT NULL AND seq IS NOT NULL AND kind IS NOT NULL
UNION ALL
SELECT i.ts, i.session_hmac, i.generation, i.stream_id, i.event_id, i.verdict, i.dispatch_id,
       coalesce(i.origin_stream_id, e.stream_id) AS origin_stream_id,
       coalesce(i.seq, e.seq) AS seq,
       coalesce(i.kind, e.kind) AS kind
FROM (SELECT * FROM inbox
      WHERE origin_stream_id IS NULL OR seq IS NULL OR kind IS NULL) i
LEFT JOIN a_event_index e USING (session_hmac, generation, event_id);

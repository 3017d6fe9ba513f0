-- name: a_inbox
-- purpose: receipts with origin stream, seq and kind resolved through the event log
--          when the client did not record them
-- needs: inbox
CREATE OR REPLACE TABLE a_inbox AS
SELECT i.file_id, i.pos, i.ts, i.session_hmac, i.generation, i.stream_id, i.event_id,
       i.verdict, i.reject_reason, i.delivery, i.message_digest, i.jsonrpc_id, i.dispatch_id,
       coalesce(i.origin_stream_id, e.stream_id) AS origin_stream_id,
       coalesce(i.seq, e.seq) AS seq,
       coalesce(i.kind, e.kind) AS kind
FROM inbox i
LEFT JOIN a_event_index e USING (session_hmac, generation, event_id);

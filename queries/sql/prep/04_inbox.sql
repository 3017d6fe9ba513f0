-- name: a_inbox
-- purpose: receipts with origin stream, seq and kind resolved through the event log
--          when the client did not record them (only those rows are joined). Only what the
--          join adds is stored (`a_inbox_resolved`: the receipts that lacked one of them);
--          the others are read from `inbox` itself. A receipt's dispatch id is not among its
--          columns: no reader of `a_inbox` needs it (`inbox` has it), and writing it for the
--          resolved receipts cost about a tenth of the step.
-- needs: inbox
CREATE OR REPLACE TABLE a_inbox_resolved AS
SELECT i.ts, i.session_hmac, i.generation, i.stream_id, i.event_id, i.verdict,
       coalesce(i.origin_stream_id, e.stream_id) AS origin_stream_id,
       coalesce(i.seq, e.seq) AS seq,
       coalesce(i.kind, e.kind) AS kind
FROM (SELECT * FROM inbox WHERE NOT receipt_placed(origin_stream_id, seq, kind)) i
LEFT JOIN a_event_index e USING (session_hmac, generation, event_id);

-- Temporary, bound when read, as a_event_index (03_event_index.sql); other connections (the
-- dashboard) read the same union of `inbox` and `a_inbox_resolved`.
CREATE OR REPLACE TEMP VIEW a_inbox AS
SELECT ts, session_hmac, generation, stream_id, event_id, verdict,
       origin_stream_id, seq, kind
FROM inbox WHERE receipt_placed(origin_stream_id, seq, kind)
UNION ALL
SELECT * FROM a_inbox_resolved;

-- name: replay_buffer_exhausted
-- invariant: a server that issued an event id can replay from it while the session lives; a bounded replay buffer must not reject a cursor it produced
-- failure: A bounded replay buffer (256 or 512 events) evicts a stream's events before its
--   client reconnects: the server rejects a cursor it issued itself and the events after it are
--   gone.
-- reports: Cocoanetics/SwiftMCP PR 109 and an OloEngine diagnostics server (bounded replay
--   buffers that evict the cursor of a client that reconnects after enough events)
-- dashboard: Streams & replay: a `high` row per stream next to its `cursor_rejected`; the
--   detail gives the cursor's seq, the events lost after it and, when the recorder logged it,
--   when it was evicted and how full the store was.
-- fix: Retain per stream rather than globally, size retention by time (the longest reconnect
--   you accept), never evict a stream that is still open or awaiting a resume, and tell the
--   client to re-issue the request when its cursor is gone.
-- severity: high
-- needs: streams, events
-- unit: stream
-- page: streams
-- facts: streams.resume_from_event_id
-- units: streams WHERE state = 'CURSOR_REJECTED' BY session_hmac, generation, stream_id
-- The cursor is judged by the event log: an event the server produced on this very stream
-- (a cursor it never produced, or one of another stream, is a client fault, see
-- cursor_rejected and cursor_misrouted). Lost events: after the acknowledged position (the
-- later of the cursor and the last acknowledged event, see a_resumes), neither priming
-- nor heartbeat, never accepted by the client (basis client, when the session has inbox
-- receipts), else never replayed by the server (basis server). A ledger that records no
-- resume cursor cannot show which cursor was rejected: its rejections are `cannot_tell`.
-- Driven from the rejected resumes (a handful): receipts and evictions are read only for
-- their streams and cursors, not aggregated over whole tables.
WITH judged AS (
    -- The first rejected resume of each stream whose cursor the server produced on it
    -- (ties on ts broken by the cursor, so a rerun picks the same one); lost events are
    -- counted from the acknowledged position (a_resumes: defined once).
    SELECT session_hmac, generation, stream_id, cursor, cursor_seq, acked_seq, ts,
           -- (a_inbox_sessions: the sessions of `inbox`, a row each, not every receipt's)
           session_hmac IN (SELECT session_hmac FROM a_inbox_sessions) AS client_basis
    FROM (SELECT session_hmac, generation, stream_id, resume_from_event_id AS cursor,
                 cursor_seq, acked_seq, ts,
                 row_number() OVER (PARTITION BY session_hmac, generation, stream_id
                                    ORDER BY ts, resume_from_event_id, acked_seq) AS k
          FROM a_resumes
          WHERE next_state = 'CURSOR_REJECTED' AND cursor_stream_id = stream_id)
    WHERE k = 1
),
accepted AS (
    SELECT DISTINCT i.session_hmac, i.generation, i.origin_stream_id AS stream_id, i.seq
    FROM a_inbox i
    SEMI JOIN judged j
      ON j.session_hmac = i.session_hmac AND j.generation = i.generation
     AND j.stream_id = i.origin_stream_id
    WHERE i.verdict = 'accepted'
),
lost AS (
    SELECT j.session_hmac, j.generation, j.stream_id, list(x.seq ORDER BY x.seq) AS seqs
    FROM judged j
    JOIN a_event_index x
      ON x.session_hmac = j.session_hmac AND x.generation = j.generation
     AND x.stream_id = j.stream_id AND x.seq > j.acked_seq
    LEFT JOIN accepted a
      ON a.session_hmac = x.session_hmac AND a.generation = x.generation
     AND a.stream_id = x.stream_id AND a.seq = x.seq
    WHERE lost_to_client(x.kind, j.client_basis, a.seq IS NOT NULL, x.replayed)
    GROUP BY j.session_hmac, j.generation, j.stream_id
),
evicted AS (
    SELECT e.session_hmac, e.generation, e.event_id, min(e.ts) AS evicted_at,
           max(e.buffer_depth) AS buffer_depth
    FROM events e
    SEMI JOIN judged j
      ON j.session_hmac = e.session_hmac AND j.generation = e.generation
     AND j.cursor = e.event_id
    WHERE e.disposition = 'evicted'
    GROUP BY e.session_hmac, e.generation, e.event_id
)
SELECT j.session_hmac, j.generation, j.stream_id, 'high' AS severity, j.ts,
       json_object('basis', CASE WHEN j.client_basis THEN 'client' ELSE 'server' END,
                   'cursor', j.cursor, 'cursor_seq', j.cursor_seq,
                   'events_lost', coalesce(len(l.seqs), 0),
                   'lost_seqs', coalesce(l.seqs, []),
                   'evicted_at', v.evicted_at, 'buffer_depth', v.buffer_depth) AS detail
FROM judged j
LEFT JOIN lost l USING (session_hmac, generation, stream_id)
LEFT JOIN evicted v
  ON v.session_hmac = j.session_hmac AND v.generation = j.generation AND v.event_id = j.cursor

-- name: cursor_rejected
-- invariant: resumes present cursors the server still holds (informational: a rejection is safe, but costs a re-request)
-- failure: A resume presents a cursor the server does not hold: a wrong Last-Event-ID, an
--   evicted replay buffer, or a rollback that dropped the cursor index. Safe, but the client
--   must re-request.
-- reports: Cocoanetics/SwiftMCP PR 109 and an OloEngine diagnostics server (bounded replay
--   buffers evicting a reconnecting client's cursor)
-- dashboard: Streams & replay: a `low` row per stream; many of them in one stage point at a
--   buffer or a rollback (see `replay_buffer_exhausted`, `rollback_cursor_dropped`).
-- fix: Size replay retention for the longest expected reconnect; clients send the id of the
--   last event they accepted and re-issue the request when the cursor is refused.
-- severity: low
-- needs: streams
-- facts: none
-- unit: stream
-- page: streams
SELECT session_hmac, generation, stream_id, 'low' AS severity, min(ts) AS ts,
       json_object('rejections', count(*)) AS detail
FROM streams
WHERE state = 'CURSOR_REJECTED'
GROUP BY session_hmac, generation, stream_id

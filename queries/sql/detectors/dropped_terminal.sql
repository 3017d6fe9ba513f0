-- name: dropped_terminal
-- invariant: a result or error event is never dropped under backpressure
-- failure: The terminal result or error of a request is dropped, or deleted with the stream's
--   stored events when the stream closes, before a client that lost the connection could replay
--   it.
-- reports: cloudflare/agents PR 1607 (stored events, the final response among them, cleared
--   when the stream closes)
-- dashboard: Overview: the `silent_truncations` gate fails; Streams & replay shows a `critical`
--   row per stream, with a `high` replay gap beside it.
-- fix: Pin result and error events: deliver them before the connection may close, and keep them
--   replayable until the session ends or the client acknowledged them.
-- severity: critical
-- needs: events
-- facts: none
-- unit: stream
-- page: streams
-- The server's own log is the evidence (basis `server`): a terminal event dropped and
-- never sent or replayed later.
SELECT e.session_hmac, e.generation, e.stream_id, 'critical' AS severity, min(e.ts) AS ts,
       min(e.event_id) AS event_id,
       json_object('basis', 'server', 'kinds', list(DISTINCT e.kind ORDER BY e.kind), 'dropped', count(*))
           AS detail
FROM events e
-- Whether the event was delivered after all is the event index's (03_event_index.sql): an
-- event id logged once is its own row there (this one, dropped), one logged more than once
-- is in a_event_repeats, looked up for the few dropped answers (a join with the whole
-- index built a hash table of every event).
LEFT JOIN a_event_repeats x USING (session_hmac, generation, event_id)
WHERE e.disposition = 'dropped' AND e.kind IN ('result', 'error')
  AND e.session_hmac IS NOT NULL AND e.generation IS NOT NULL AND e.event_id IS NOT NULL
  AND NOT coalesce(x.delivered, false)
GROUP BY e.session_hmac, e.generation, e.stream_id

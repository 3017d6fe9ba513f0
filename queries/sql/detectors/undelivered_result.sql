-- name: undelivered_result
-- invariant: the result or error the server produced for a POST reaches its client: on the POST's own stream, or through a later resume
-- failure: The server produced the answer to a request, but the stream that should carry it
--   ended first (the client or a proxy hung up, a proxy answered 200 with an empty body) and no
--   resume delivered it later: the client waits until it times out, and a re-send runs the call
--   again.
-- reports: Caddy 2.6 answering an MCP POST 200 with 0 bytes ("use of closed network connection"
--   in its runtime log) under the official MCP conformance suite; seed 000 (a client that never
--   got the answer re-sends the write)
-- dashboard: Overview: the `lost_responses` gate fails; Streams & replay shows a row per stream
--   (`high` for a write or paid tool, else `medium`) whose detail names the evidence (`basis`:
--   server, client or proxy).
-- fix: Keep the answer replayable until the client acknowledges it (an event store, a priming
--   event so the client holds a cursor), make writes idempotent so a re-send is harmless, and
--   check that the proxy streams event bodies (Caddy `flush_interval -1`, nginx
--   `proxy_buffering off`).
-- severity: high, medium
-- needs: events|proxy
-- facts: proxy.body_bytes_sent, proxy.resp_content_type
-- undecided: proxy.client_closed
-- units: proxy WHERE upper(method) = 'POST' AND status BETWEEN 200 AND 299 AND status <> 202 AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_hmac = proxy.session_hmac)
-- other_bases: events
-- unit: stream (else the proxy request)
-- page: streams
-- Three bases, each a source that can show delivery; a stream any of them shows is one
-- finding, its detail naming every basis (`bases`) and the first of client, server, proxy
-- (`basis`). None compares the time of the break with the time of the result.
-- - server (sessions without client receipts): the event log shows the POST's result or error
--   produced, never replayed, and the stream ledger shows the stream ended (a close reason
--   recorded) without its `CLOSED`/`completed` row (the recorder writes that only once the
--   answer went out);
-- - client (sessions with receipts): no receipt of that result or error, the stream ended;
-- - proxy: a POST answered 2xx with an event stream of 0 body bytes (`empty_event_stream`),
--   placed on its stream by request id, else on the POST stream of its session opened
--   nearest its run (within a second; two as near: not placed). Where the event log covers
--   that session, only if it shows the answer produced (a client that cancelled its own
--   request gets none). Where it does not, the proxy row alone must show that the client
--   did not end the request (`client_closed` false): a client that hung up before the
--   first event leaves the same empty 200, so a row that cannot tell (Caddy, a log without
--   nginx's `$request_completion` or Envoy's flags) is `cannot_tell`, never a finding. A
--   log without the session (an initialize's answer, a redacting format) adds its evidence
--   to the stream another basis found nearest its run, else the request is judged alone.
-- A result or error dropped under backpressure is `dropped_terminal`'s, not this one's.
-- Driven from the few streams that can be findings, never from every stream: a POST's
-- answer is checked against the receipts once, as the answers (result or error events)
-- no receipt names, in one anti join of the answers with the receipts; the streams of
-- those, the streams the server basis can judge (ended without completing, in sessions
-- without receipts) and the streams an empty answer is placed on are the candidates, and
-- only their answers are grouped and their requests looked up.
WITH
-- the answers (result or error) the server logged, by the event index
ends AS (
    SELECT session_hmac, generation, stream_id, event_id, first_ts, replayed, dropped,
           delivered
    FROM a_event_index
    WHERE kind IN ('result', 'error')
),
-- the answers of sessions with receipts that no receipt names. First the answers no
-- receipt of an answer's kind names (the receipt's own kind: a seventh of the receipts
-- probe the answers' table, not every one), before the sessions with receipts are kept
-- (materialized, so that the semi join with them joins the few left, not every answer);
-- then, of those, the ones no receipt of their sessions names, whatever its kind (those
-- receipts found by the session key alone, which DuckDB filters the scan by)
unreceived_by_kind AS MATERIALIZED (
    SELECT e.session_hmac, e.generation, e.stream_id, e.event_id
    FROM ends e
    ANTI JOIN (SELECT session_hmac, generation, event_id FROM inbox
               WHERE kind IN ('result', 'error')) i
      ON i.session_hmac = e.session_hmac AND i.generation = e.generation
     AND i.event_id = e.event_id
),
unreceived_kept AS MATERIALIZED (
    SELECT u.*
    FROM unreceived_by_kind u
    SEMI JOIN a_inbox_sessions s
      ON s.session_hmac = u.session_hmac AND s.generation = u.generation
),
unreceived AS MATERIALIZED (
    SELECT u.*
    FROM unreceived_kept u
    ANTI JOIN (SELECT i.session_hmac, i.generation, i.event_id
               FROM inbox i
               SEMI JOIN (SELECT DISTINCT session_hmac FROM unreceived_kept) k
                 ON k.session_hmac = i.session_hmac) i
      ON i.session_hmac = u.session_hmac AND i.generation = u.generation
     AND i.event_id = u.event_id
),
-- each empty answer's nearest POST stream(s) of its session (a_empty_answers)
nearest AS (SELECT * FROM a_empty_answers),
-- the streams any basis may find: a client's unreceived answer, a server-basis stream
-- (ended without completing, close reasons recorded, a session without receipts), the
-- one stream an empty answer is placed on
candidates AS (
    SELECT session_hmac, generation, stream_id FROM unreceived
    UNION ALL
    SELECT session_hmac, generation, stream_id
    FROM a_streams
    ANTI JOIN a_inbox_sessions USING (session_hmac, generation)
    WHERE method = 'POST' AND NOT completed AND reasoned AND last_state <> 'STREAM_OPEN'
    UNION ALL
    SELECT session_hmac, generation, stream_id FROM nearest WHERE n = 1
),
life AS (
    -- each candidate stream once (a_streams: its opening request, last state, close
    -- reasons)
    SELECT session_hmac, generation, stream_id, opened_ts, last_state, completed, reasoned,
           method, request_id, tool_name, tool_class
    FROM a_streams
    SEMI JOIN candidates c USING (session_hmac, generation, stream_id)
),
-- the answer the server produced on each candidate stream, by its own log
terminal AS (
    SELECT session_hmac, generation, stream_id,
           arg_min(event_id, (first_ts, event_id)) AS event_id,
           min(first_ts) AS produced_ts,
           bool_or(replayed) AS replayed,
           bool_and(dropped AND NOT delivered) AS dropped_only
    FROM ends
    SEMI JOIN candidates c USING (session_hmac, generation, stream_id)
    GROUP BY ALL
),
posts AS (
    SELECT l.*, t.event_id, t.produced_ts, t.replayed, t.dropped_only
    FROM life l
    LEFT JOIN terminal t USING (session_hmac, generation, stream_id)
    WHERE l.method = 'POST'
),
server AS (
    SELECT session_hmac, generation, stream_id, 'server' AS basis
    FROM posts
    ANTI JOIN a_inbox_sessions USING (session_hmac, generation)
    WHERE event_id IS NOT NULL AND NOT dropped_only AND NOT replayed AND NOT completed
      AND reasoned AND last_state <> 'STREAM_OPEN'
),
-- (the stream's answer is one of the index's rows of it: unreceived names it or not)
client AS (
    SELECT p.session_hmac, p.generation, p.stream_id, 'client' AS basis
    FROM posts p
    SEMI JOIN a_inbox_sessions USING (session_hmac, generation)
    SEMI JOIN unreceived u
      ON u.session_hmac = p.session_hmac AND u.generation = p.generation
     AND u.event_id = p.event_id
    WHERE p.event_id IS NOT NULL AND NOT p.dropped_only AND p.last_state <> 'STREAM_OPEN'
),
empty AS (
    SELECT ts, session_hmac, request_id, duration_ms, client_closed, file_id, pos
    FROM proxy
    WHERE empty_event_stream(method, status, body_bytes_sent, resp_content_type)
),
-- each empty answer placed on one stream, and what the server's log says of it: the
-- answer produced, or (a session it covers) none produced
-- (only the sessions of the empty answers' streams are looked up among the events)
covered AS (
    SELECT DISTINCT e.session_hmac, e.generation
    FROM events e
    SEMI JOIN nearest c ON c.session_hmac = e.session_hmac AND c.generation = e.generation
),
on_stream AS (
    SELECT c.file_id, c.pos, c.session_hmac, c.generation, c.stream_id,
           p.event_id IS NOT NULL AS produced, v.session_hmac IS NOT NULL AS covered
    FROM nearest c
    JOIN posts p USING (session_hmac, generation, stream_id)
    LEFT JOIN covered v ON v.session_hmac = c.session_hmac AND v.generation = c.generation
    WHERE c.n = 1
),
placed AS (
    SELECT o.file_id, o.pos, o.session_hmac, o.generation, o.stream_id
    FROM on_stream o
    JOIN empty e USING (file_id, pos)
    -- the server's log shows the answer produced; a session it does not cover, the proxy
    -- row shows the client did not end the request
    WHERE o.produced OR (NOT o.covered AND e.client_closed = false)
),
-- an empty answer whose log kept no session (Caddy answering an initialize: the session is
-- only in the answer, whose raw id is never kept; a redacting log) nearest to one stream
-- another basis found, opened within a second of its run: evidence for that stream, not a
-- second unit
found_near AS (
    SELECT e.file_id, e.pos, o.session_hmac, o.generation, o.stream_id,
           greatest(epoch_ms(e.ts) - o.opened_ms,
                    o.opened_ms - epoch_ms(e.ts) - coalesce(e.duration_ms, 0), 0) AS dist
    FROM (SELECT *, epoch_ms(ts) - 1000 AS lo,
                 epoch_ms(ts) + coalesce(duration_ms, 0) + 1000 AS hi
          FROM empty WHERE session_hmac IS NULL) e
    JOIN (SELECT p.session_hmac, p.generation, p.stream_id, epoch_ms(p.opened_ts) AS opened_ms
          FROM (SELECT * FROM server UNION ALL SELECT * FROM client) b
          JOIN posts p USING (session_hmac, generation, stream_id)) o
      -- (bounds as columns: a range join of two comparisons, not a nested loop that grows
      -- with the product of the two)
      ON o.opened_ms >= e.lo AND o.opened_ms <= e.hi
),
attached AS (
    SELECT file_id, pos, min(session_hmac) AS session_hmac, min(generation) AS generation,
           min(stream_id) AS stream_id
    FROM (SELECT *, min(dist) OVER (PARTITION BY file_id, pos) AS best FROM found_near)
    WHERE dist = best
    GROUP BY file_id, pos
    HAVING count(*) = 1
),
by_stream AS (
    SELECT session_hmac, generation, stream_id,
           list(DISTINCT basis ORDER BY basis) AS bases
    FROM (SELECT * FROM server
          UNION ALL SELECT * FROM client
          UNION ALL SELECT session_hmac, generation, stream_id, 'proxy' FROM placed
          UNION ALL SELECT session_hmac, generation, stream_id, 'proxy' FROM attached)
    GROUP BY ALL
),
-- (only the requests of the streams found)
tool_classes AS (
    SELECT d.session_hmac, d.generation, d.request_id, min(d.tool_class) AS tool_class
    FROM dispatches d
    SEMI JOIN (SELECT p.session_hmac, p.generation, p.request_id
               FROM by_stream b JOIN posts p USING (session_hmac, generation, stream_id)) f
      ON f.session_hmac = d.session_hmac AND f.generation = d.generation
     AND f.request_id = d.request_id
    WHERE d.request_id IS NOT NULL AND d.tool_class IS NOT NULL
    GROUP BY ALL
),
streams_found AS (
    SELECT p.session_hmac, p.generation, p.stream_id, p.event_id,
           CASE WHEN is_write(coalesce(p.tool_class, d.tool_class)) THEN 'high'
                ELSE 'medium' END AS severity,
           p.opened_ts AS ts,
           json_object(
               'basis', CASE WHEN list_contains(b.bases, 'client') THEN 'client'
                             WHEN list_contains(b.bases, 'server') THEN 'server'
                             ELSE 'proxy' END,
               'bases', b.bases,
               'request_id', p.request_id,
               'tool_name', p.tool_name,
               'tool_class', coalesce(p.tool_class, d.tool_class),
               'answer_produced', p.produced_ts,
               'stream_end', p.last_state) AS detail
    FROM by_stream b
    JOIN posts p USING (session_hmac, generation, stream_id)
    LEFT JOIN tool_classes d
      ON d.session_hmac = p.session_hmac AND d.generation = p.generation
     AND d.request_id = p.request_id
),
-- an empty answer judged by its proxy row alone: neither placed on a stream nor attached
-- to one, nor placed on a stream of a session whose event log shows no answer produced
alone AS (
    SELECT e.*
    FROM empty e
    WHERE NOT EXISTS (SELECT 1 FROM placed k WHERE k.file_id = e.file_id AND k.pos = e.pos)
      AND NOT EXISTS (SELECT 1 FROM attached a WHERE a.file_id = e.file_id AND a.pos = e.pos)
      AND NOT EXISTS (SELECT 1 FROM on_stream o
                       WHERE o.file_id = e.file_id AND o.pos = e.pos AND o.covered)
),
-- one the client did not end that no stream could be placed on (no ledger, no session in
-- the log, or two streams of its session as near its run): the request itself is the unit
unplaced AS (
    SELECT e.session_hmac, NULL::BIGINT AS generation, NULL::VARCHAR AS stream_id,
           NULL::VARCHAR AS event_id, 'medium' AS severity, e.ts,
           json_object('basis', 'proxy', 'bases', ['proxy'], 'request_id', e.request_id,
                       'nearest_streams', coalesce(max(c.n), 0)) AS detail
    FROM alone e
    LEFT JOIN nearest c ON c.file_id = e.file_id AND c.pos = e.pos
    WHERE e.client_closed = false
      AND NOT EXISTS (SELECT 1 FROM on_stream o WHERE o.file_id = e.file_id AND o.pos = e.pos)
    GROUP BY e.session_hmac, e.ts, e.request_id, e.file_id, e.pos
),
-- one whose row cannot tell a client that hung up from an answer lost on the way: neither
-- a finding nor a pass
undecided AS (
    SELECT e.session_hmac, o.generation, o.stream_id, NULL::VARCHAR AS event_id,
           'cannot_tell' AS severity, e.ts,
           json_object('missing', 'proxy.client_closed', 'file_id', e.file_id) AS detail
    FROM alone e
    LEFT JOIN on_stream o ON o.file_id = e.file_id AND o.pos = e.pos
    WHERE e.client_closed IS NULL
)
SELECT * FROM streams_found
UNION ALL
SELECT * FROM unplaced
UNION ALL
SELECT * FROM undecided

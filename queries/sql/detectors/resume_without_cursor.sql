-- name: resume_without_cursor
-- invariant: on a resumable session, a client that holds a cursor for a broken stream presents it (Last-Event-ID) when it re-opens the stream
-- failure: A client that had received events with ids reconnects without Last-Event-ID, so the
--   server cannot replay and everything sent in the gap is lost silently.
-- reports: modelcontextprotocol/inspector issue 723 (reconnects without Last-Event-ID although
--   events with ids had been received)
-- dashboard: Streams & replay: a `medium` row per stream with when it broke, when it was
--   re-opened and the lost seqs; the inspector shows a RESUME_PENDING with no cursor.
-- fix: Persist the id of the last accepted event per stream and present it on the reconnecting
--   GET; a client that lost it re-issues the request instead.
-- severity: medium
-- needs: streams, events, sessions
-- unit: stream
-- page: streams
-- facts: streams.resume_from_event_id, sessions.resumable|sessions.protocol_version
-- units: streams WHERE state = 'DISCONNECTED' BY session_hmac, generation, stream_id
-- undecided: sessions.resumable|sessions.protocol_version
-- A re-open is the first RESUME_PENDING, or STREAM_OPEN by GET, after a DISCONNECTED; it
-- is cursorless when it names no resume_from_event_id. The client held a cursor when it
-- had accepted an event of the stream before the break (basis client, when the session
-- has inbox receipts); without receipts, when the server had delivered an event other
-- than priming (basis server: a priming-only stream is priming_lost's case). Lost: events
-- after that position, produced before the re-open, never accepted (client) or never
-- replayed (server); priming and heartbeats never count. A ledger that never records a
-- resume cursor cannot tell a cursorless re-open from one it did not log, and sessions
-- that say neither whether they are resumable nor their revision cannot show that a
-- cursor was owed: such streams are `cannot_tell`.
-- Driven from the re-opens, a few per thousand streams: every position and lost event is
-- found by joining the candidates to the rows of their own streams, never by aggregating
-- whole tables (which grows with the fleet, not with the re-opens).
-- Only the streams that disconnected on a resumable session are ordered (about one in
-- nine of the broken streams; the windows partition by stream; a NULL-safe semi join keeps
-- a stream logged without its session one partition).
WITH disconnected AS (
    SELECT DISTINCT session_hmac, generation, stream_id FROM streams
    SEMI JOIN (SELECT session_hmac FROM a_sessions WHERE resumable) r USING (session_hmac)
    WHERE state = 'DISCONNECTED'
),
ordered AS (
    -- (k: the row's place in its log's order, record_order; the re-open after a row is the
    -- least such place of a RESUME_PENDING or STREAM_OPEN after it, in one window)
    SELECT s.session_hmac, s.generation, s.stream_id, s.state, s.ts, s.method,
           s.resume_from_event_id, s.last_sent_event_id,
           record_order(s.ts, s.file_id, s.pos) AS k,
           min(CASE WHEN s.state IN ('RESUME_PENDING', 'STREAM_OPEN')
                    THEN record_order(s.ts, s.file_id, s.pos) END)
               OVER (PARTITION BY s.session_hmac, s.generation, s.stream_id
                     ORDER BY s.ts, s.file_id, s.pos
                     ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS reopen_k
    FROM streams s
    SEMI JOIN disconnected d
      ON s.session_hmac IS NOT DISTINCT FROM d.session_hmac
     AND s.generation IS NOT DISTINCT FROM d.generation
     AND s.stream_id IS NOT DISTINCT FROM d.stream_id
),
reopens AS (
    SELECT d.session_hmac, d.generation, d.stream_id, d.k, d.ts AS disc_ts,
           d.last_sent_event_id, r.ts AS reopen_ts
    FROM ordered d
    JOIN ordered r
      ON r.session_hmac = d.session_hmac AND r.generation = d.generation
     AND r.stream_id = d.stream_id AND r.k = d.reopen_k
    JOIN a_sessions s ON s.session_hmac = d.session_hmac AND s.resumable
    WHERE d.state = 'DISCONNECTED' AND r.resume_from_event_id IS NULL
      AND (r.state = 'RESUME_PENDING' OR r.method = 'GET')
),
client_pos AS (
    SELECT r.session_hmac, r.generation, r.stream_id, r.k, max(i.seq) AS pos
    FROM reopens r
    JOIN a_inbox i
      ON i.session_hmac = r.session_hmac AND i.generation = r.generation
     AND i.origin_stream_id = r.stream_id AND i.ts <= r.disc_ts
    WHERE i.verdict = 'accepted'
    GROUP BY ALL
),
cursor_pos AS (
    SELECT r.session_hmac, r.generation, r.stream_id, r.k, max(e.seq) AS pos
    FROM reopens r
    JOIN a_event_index e
      ON e.session_hmac = r.session_hmac AND e.generation = r.generation
     AND e.event_id = r.last_sent_event_id
    GROUP BY ALL
),
sent_pos AS (
    SELECT r.session_hmac, r.generation, r.stream_id, r.k, max(v.seq) AS pos
    FROM reopens r
    JOIN events v
      ON v.session_hmac = r.session_hmac AND v.generation = r.generation
     AND v.stream_id = r.stream_id AND v.ts <= r.disc_ts
    WHERE v.disposition = 'sent'
    GROUP BY ALL
),
judged AS (
    -- (a_inbox_sessions: the sessions of `inbox`, a row each, not every receipt's)
    SELECT r.*, r.session_hmac IN (SELECT session_hmac FROM a_inbox_sessions) AS client_basis,
           c.pos AS client_pos, coalesce(e.pos, v.pos) AS server_pos
    FROM reopens r
    LEFT JOIN client_pos c USING (session_hmac, generation, stream_id, k)
    LEFT JOIN cursor_pos e USING (session_hmac, generation, stream_id, k)
    LEFT JOIN sent_pos v USING (session_hmac, generation, stream_id, k)
),
held AS (
    SELECT *, CASE WHEN client_basis THEN client_pos ELSE server_pos END AS pos
    FROM judged
    WHERE CASE WHEN client_basis THEN client_pos IS NOT NULL ELSE server_pos >= 1 END
),
accepted AS (
    -- only the receipts of the candidates' streams
    SELECT DISTINCT i.session_hmac, i.generation, i.origin_stream_id AS stream_id, i.seq
    FROM a_inbox i
    SEMI JOIN held h
      ON h.session_hmac = i.session_hmac AND h.generation = i.generation
     AND h.stream_id = i.origin_stream_id
    WHERE i.verdict = 'accepted'
),
lost AS (
    SELECT h.session_hmac, h.generation, h.stream_id, h.disc_ts, h.reopen_ts, h.pos,
           h.client_basis, x.seq
    FROM held h
    JOIN a_event_index x
      ON x.session_hmac = h.session_hmac AND x.generation = h.generation
     AND x.stream_id = h.stream_id AND x.seq > h.pos AND x.first_ts < h.reopen_ts
    LEFT JOIN accepted a
      ON a.session_hmac = x.session_hmac AND a.generation = x.generation
     AND a.stream_id = x.stream_id AND a.seq = x.seq
    WHERE lost_to_client(x.kind, h.client_basis, a.seq IS NOT NULL, x.replayed)
)
,
-- a session whose resumability a blind ledger file may hide (a_resumability_unknown)
unknown AS (SELECT * FROM a_resumability_unknown)
-- client_basis is one value per session, so bool_or is any of them
SELECT l.session_hmac, l.generation, l.stream_id,
       CASE WHEN u.file_id IS NULL THEN 'medium' ELSE 'cannot_tell' END AS severity,
       min(l.reopen_ts) AS ts,
       CASE WHEN u.file_id IS NULL
            THEN json_object('basis', CASE WHEN bool_or(l.client_basis) THEN 'client'
                                           ELSE 'server' END,
                             'disconnected_at', min(l.disc_ts),
                             'reopened_at', min(l.reopen_ts),
                             'cursor_held_seq', min(l.pos),
                             'lost_seqs', list(DISTINCT l.seq ORDER BY l.seq))
            ELSE json_object('missing', 'sessions.resumable|sessions.protocol_version',
                             'file_id', u.file_id) END AS detail
FROM lost l
LEFT JOIN unknown u ON u.session_hmac = l.session_hmac
GROUP BY l.session_hmac, l.generation, l.stream_id, u.file_id

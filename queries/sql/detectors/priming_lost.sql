-- name: priming_lost
-- invariant: on a resumable session, a stream's client holds a cursor (an accepted event) before the stream can break
-- failure: The initial empty SSE event (the priming event that gives the client a cursor) is
--   lost, then the stream breaks: the client has nothing to resume from.
-- dashboard: Streams & replay: a `medium` row per stream of a resumable session.
-- fix: Send the priming event first and flush it; a client that never got an event id re-issues
--   the request (with its idempotency key) instead of resuming.
-- severity: medium
-- needs: streams, sessions, inbox|events
-- facts: sessions.resumable|sessions.protocol_version
-- units: streams WHERE state = 'DISCONNECTED' BY session_hmac, generation, stream_id
-- undecided: sessions.resumable|sessions.protocol_version
-- unit: stream
-- page: streams
-- Basis `client`: the client accepted no event of the stream before it broke. Basis
-- `server` (sessions without receipts): nothing but priming was produced before the
-- break, and the stream was never resumed with a cursor.
-- Driven from the first breaks of the resumable sessions' streams (about one in nine of the
-- broken streams): the first accepted receipt is looked up for those streams alone (a
-- grouping of every accepted receipt by stream, for all of them, grew with the fleet).
WITH first_disc AS (
    SELECT session_hmac, generation, stream_id, min(ts) AS ts
    FROM streams
    SEMI JOIN (SELECT session_hmac FROM a_sessions WHERE resumable) r USING (session_hmac)
    WHERE state = 'DISCONNECTED'
    GROUP BY ALL
),
client_disc AS (
    SELECT * FROM first_disc SEMI JOIN a_inbox_sessions USING (session_hmac, generation)
),
-- The accepted receipts of those streams' sessions are found by the session key alone
-- first: a join on one key lets DuckDB filter the scans of the receipts by those few
-- sessions (a Bloom filter); joined on three keys, every accepted receipt was probed
-- against the streams (x12-18 from 10M to 100M events, a table of 240k streams out of the
-- CPU's cache), and every receipt of no origin stream read a second time for the check
-- below.
client_receipts AS MATERIALIZED (
    SELECT a.session_hmac, a.generation, a.origin_stream_id, a.ts
    FROM a_inbox a
    SEMI JOIN (SELECT DISTINCT session_hmac FROM client_disc) k
      ON k.session_hmac = a.session_hmac
    WHERE a.verdict = 'accepted'
),
first_acc AS (
    SELECT d.session_hmac, d.generation, d.stream_id, min(a.ts) AS ts
    FROM client_disc d
    JOIN client_receipts a
      ON a.session_hmac = d.session_hmac AND a.generation = d.generation
     AND a.origin_stream_id = d.stream_id
    GROUP BY ALL
),
client AS (
    SELECT d.session_hmac, d.generation, d.stream_id, d.ts,
           json_object('basis', 'client', 'first_accepted', a.ts) AS detail
    FROM client_disc d
    LEFT JOIN first_acc a
      ON a.session_hmac = d.session_hmac AND a.generation = d.generation
     AND a.stream_id = d.stream_id
    WHERE (a.ts IS NULL OR a.ts > d.ts)
      -- A receipt accepted before the break whose origin stream is unknown (no
      -- origin_stream_id and no event log to resolve it) may have been this stream's: the
      -- client may have held a cursor, so absence cannot be claimed.
      AND NOT EXISTS (
            SELECT 1 FROM client_receipts u
             WHERE u.session_hmac = d.session_hmac AND u.generation = d.generation
               AND u.origin_stream_id IS NULL AND u.ts <= d.ts)
),
server AS (
    SELECT d.session_hmac, d.generation, d.stream_id, d.ts,
           json_object('basis', 'server') AS detail
    FROM first_disc d
    ANTI JOIN a_inbox_sessions USING (session_hmac, generation)
    -- (a semi join, not EXISTS: that was planned as a mark join holding every event)
    SEMI JOIN events USING (session_hmac, generation)
    WHERE NOT EXISTS (SELECT 1 FROM a_event_index e
                       WHERE e.session_hmac = d.session_hmac AND e.generation = d.generation
                         AND e.stream_id = d.stream_id AND e.first_ts < d.ts
                         AND e.kind <> 'priming')
      AND NOT EXISTS (SELECT 1 FROM streams r
                       WHERE r.session_hmac = d.session_hmac AND r.generation = d.generation
                         AND r.stream_id = d.stream_id AND r.state = 'RESUME_PENDING'
                         AND r.resume_from_event_id IS NOT NULL AND r.ts > d.ts)
),
-- a session whose resumability a blind ledger file may hide (a_resumability_unknown)
unknown AS (SELECT * FROM a_resumability_unknown)
SELECT x.session_hmac, x.generation, x.stream_id,
       CASE WHEN u.file_id IS NULL THEN 'medium' ELSE 'cannot_tell' END AS severity, x.ts,
       CASE WHEN u.file_id IS NULL THEN x.detail
            ELSE json_object('missing', 'sessions.resumable|sessions.protocol_version',
                             'file_id', u.file_id) END AS detail
FROM (SELECT * FROM client UNION ALL SELECT * FROM server) x
LEFT JOIN unknown u ON u.session_hmac = x.session_hmac

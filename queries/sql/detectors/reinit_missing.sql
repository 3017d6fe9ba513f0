-- name: reinit_missing
-- invariant: after a 404 on a session, the client stops using it and sends a new initialize within the re-init window
-- failure: After a 404 on an expired session the client keeps sending on the dead session id,
--   or gives up, instead of initializing a new session.
-- dashboard: Overview: the `reinit_after_404` gate fails; Sessions & proxy lists a `high` row
--   per 404 not followed by an initialize.
-- fix: On 404 with a session id, drop the session and send a new initialize without one (the
--   transport specification requires it).
-- severity: high
-- needs: proxy
-- facts: proxy.session_hmac, proxy.initialize, proxy.principal|proxy.client_addr
-- units: proxy WHERE dead_session_unit(status, session_hmac, method, $dead_statuses, file_id NOT IN (SELECT file_id FROM file_facts WHERE fact = 'proxy.session_hmac'))
-- undecided: client identity, re-initialize, use after the 404
-- params: reinit_window_s, dead_statuses
-- unit: (session_hmac, ts of the 404)
-- page: sessions
-- The client is its principal; without one, its address and User-Agent, but only while
-- that pair has a single live session: every Node client sends `User-Agent: node`, and
-- behind one address another client's initialize would pass for this one's.
-- `p` is read by each use with its own filter (the 404s, the initializes, the anonymous
-- clients' rows, a dead session's later requests), never copied: a copy of every request
-- with its client, read four times, went out of memory at 100M events (x23.7 over 10M).
WITH p AS NOT MATERIALIZED (
    SELECT *, proxy_client(principal, client_addr, user_agent) AS client FROM proxy
),
-- The sessions of each address and User-Agent, live from the start of their first request
-- to the end of their last (a standalone GET stream stays open while the client idles).
spans AS (
    SELECT client, session_hmac, min(epoch_ms(ts)) AS first_ms,
           max(epoch_ms(ts) + coalesce(duration_ms, 0)) AS last_ms
    FROM p
    WHERE principal IS NULL AND client IS NOT NULL AND session_hmac IS NOT NULL
    GROUP BY ALL
),
opened AS (
    SELECT client, first_ms, count(*) OVER (PARTITION BY client ORDER BY first_ms) AS n
    FROM spans
),
ended AS (
    SELECT client, last_ms, count(*) OVER (PARTITION BY client ORDER BY last_ms) AS n
    FROM spans
),
-- Live at the 404: opened at or before it, less those that had ended by then. A log
-- dates by the millisecond (nginx by its cached clock), so a client's next request can
-- begin in the millisecond its previous answer was logged: ending then is ended. The dead
-- session itself is live through its own 404; where the 404 is its last row and lasts no
-- time, `ended` counted it, and it is added back.
gone AS (
    SELECT g.file_id, g.session_hmac, g.ts, g.client,
           g.principal IS NOT NULL
               OR coalesce(o.n, 0) - coalesce(e.n, 0)
                  + CASE WHEN own.last_ms <= g.ms THEN 1 ELSE 0 END <= 1 AS one_client
    FROM (SELECT *, epoch_ms(ts) AS ms FROM p
          WHERE dead_session(status, session_hmac, method, $dead_statuses)) g
    ASOF LEFT JOIN opened o ON o.client = g.client AND g.ms >= o.first_ms
    ASOF LEFT JOIN ended e ON e.client = g.client AND g.ms >= e.last_ms
    LEFT JOIN spans own ON own.client = g.client AND own.session_hmac = g.session_hmac
),
inits AS (
    SELECT client, ts AS init_ts FROM p
    WHERE jsonrpc_method = 'initialize' AND session_hmac IS NULL AND client IS NOT NULL
),
-- The first initialize of the 404's client after it: the only one the window can hold if
-- any does (a join to every later initialize grows with the square of a client's size).
judged AS (
    SELECT g.session_hmac, g.ts, g.client,
           coalesce(epoch_ms(i.init_ts) - epoch_ms(g.ts) <= $reinit_window_s * 1000, false)
               AS reinitialized
    FROM (SELECT * FROM gone WHERE client IS NOT NULL AND one_client) g
    ASOF LEFT JOIN inits i ON i.client = g.client AND i.init_ts > g.ts
),
-- Requests on the dead session after its 404: a join within one session's requests, of
-- the sessions with a 404 alone, found first by a 64-bit hash of their key. (Joined with
-- every request by the 64-character key, the probe kept 28.4M of 31.6M requests at 100M
-- events against 0.37M of 3.15M at 10M: DuckDB's Bloom filter of the 404s' sessions
-- pruned at 10M only, on the session key alone too; a hash table of 8-byte keys is the
-- cheaper probe for every request.)
dead AS (
    SELECT DISTINCT session_hmac, ts FROM gone
),
dead_requests AS MATERIALIZED (
    SELECT r.session_hmac, r.ts FROM p r
    SEMI JOIN (SELECT DISTINCT hash(session_hmac) AS h FROM dead) d
      ON hash(r.session_hmac) = d.h
    WHERE r.method <> 'DELETE'
),
later AS (
    SELECT g.session_hmac, g.ts, count(l.ts) AS n
    FROM dead g
    JOIN dead_requests l ON l.session_hmac = g.session_hmac AND l.ts > g.ts
    GROUP BY ALL
),
-- A re-initialize not seen may be in a proxy log that cannot show one while others do
-- (partial blindness, a_blind_spans), or in one that names no client (neither principal
-- nor address) while others do: an initialize there is nobody's in particular, so who
-- re-initialized cannot be known. Where such a log has rows in the re-init window, "not
-- re-initialized" is no evidence; the first such log by path is named.
unseen AS (
    SELECT j.session_hmac, j.ts,
           arg_min(b.file_id, b.path || '|' || b.fact) AS file_id,
           arg_min(CASE b.fact WHEN 'proxy.initialize' THEN 're-initialize'
                               ELSE 'client identity' END,
                   b.path || '|' || b.fact) AS missing
    FROM judged j
    JOIN a_blind_spans b
      ON b.fact IN ('proxy.initialize', 'proxy.principal|proxy.client_addr')
     AND blind_could_hold(b.first_ts, b.last_ts, epoch_ms(j.ts),
                          epoch_ms(j.ts) + $reinit_window_s * 1000)
    WHERE NOT j.reinitialized
    GROUP BY ALL
),
-- Used after the 404, not seen: the window has no end, so the client bounds it
-- (a_blind_clients): a later request of the same client (or of a row naming none) in a
-- proxy log that cannot show session ids while others do may have been on the dead session.
hidden AS (
    SELECT j.session_hmac, j.ts, arg_min(c.file_id, c.path) AS file_id
    FROM judged j
    JOIN a_blind_clients c
      ON (c.client = j.client OR c.client IS NULL)
     AND epoch_ms(c.last_ts) >= epoch_ms(j.ts) - blind_skew_ms()
    GROUP BY ALL
)
SELECT j.session_hmac, 'high' AS severity, j.ts,
       json_object('reason', CASE WHEN j.reinitialized OR u.file_id IS NOT NULL
                                  THEN 'used after the 404'
                                  WHEN coalesce(l.n, 0) > 0
                                  THEN 'not re-initialized, and used after the 404'
                                  ELSE 'not re-initialized' END,
                   'reinitialized', CASE WHEN u.file_id IS NULL THEN j.reinitialized END,
                   'later_requests', coalesce(l.n, 0)) AS detail
FROM judged j
LEFT JOIN later l USING (session_hmac, ts)
LEFT JOIN unseen u USING (session_hmac, ts)
WHERE (NOT j.reinitialized AND u.file_id IS NULL) OR coalesce(l.n, 0) > 0
UNION ALL
-- A 404 whose client cannot be told apart: neither a finding nor a pass (undecided).
SELECT session_hmac, 'cannot_tell' AS severity, ts,
       json_object('missing', 'client identity', 'file_id', file_id) AS detail
FROM gone
WHERE client IS NULL OR NOT one_client
UNION ALL
-- A 404 whose re-initialize a blind log may hold, and not used after it: undecided.
SELECT u.session_hmac, 'cannot_tell' AS severity, u.ts,
       json_object('missing', u.missing, 'file_id', u.file_id) AS detail
FROM unseen u
LEFT JOIN later l USING (session_hmac, ts)
WHERE coalesce(l.n, 0) = 0
UNION ALL
-- A 404 seen re-initialized and not seen used after, whose later use a log without
-- session ids may hold: undecided.
SELECT h.session_hmac, 'cannot_tell' AS severity, h.ts,
       json_object('missing', 'use after the 404', 'file_id', h.file_id) AS detail
FROM hidden h
JOIN judged j USING (session_hmac, ts)
LEFT JOIN later l USING (session_hmac, ts)
ANTI JOIN unseen u USING (session_hmac, ts)
WHERE j.reinitialized AND coalesce(l.n, 0) = 0

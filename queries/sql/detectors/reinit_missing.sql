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
-- params: reinit_window_s, dead_statuses
-- unit: (session_hmac, ts of the 404)
-- page: sessions
WITH p AS (
    SELECT *, coalesce(principal, client_addr || '|' || coalesce(user_agent, '')) AS client
    FROM proxy
),
gone AS (
    SELECT session_hmac, ts, client FROM p
    WHERE dead_session(status, session_hmac, method, $dead_statuses)
),
inits AS (
    SELECT client, ts AS init_ts FROM p
    WHERE jsonrpc_method = 'initialize' AND session_hmac IS NULL AND client IS NOT NULL
),
-- The first initialize of the 404's client after it: the only one the window can hold if
-- any does (a join to every later initialize grows with the square of a client's size).
judged AS (
    SELECT g.session_hmac, g.ts,
           coalesce(epoch_ms(i.init_ts) - epoch_ms(g.ts) <= $reinit_window_s * 1000, false)
               AS reinitialized
    FROM gone g ASOF LEFT JOIN inits i ON i.client = g.client AND i.init_ts > g.ts
),
-- Requests on the dead session after its 404: a join within one session's requests.
later AS (
    SELECT g.session_hmac, g.ts, count(l.ts) AS n
    FROM (SELECT DISTINCT session_hmac, ts FROM gone) g
    JOIN p l ON l.session_hmac = g.session_hmac AND l.ts > g.ts AND l.method <> 'DELETE'
    GROUP BY ALL
)
SELECT j.session_hmac, 'high' AS severity, j.ts,
       json_object('reinitialized', j.reinitialized,
                   'later_requests', coalesce(l.n, 0)) AS detail
FROM judged j
LEFT JOIN later l USING (session_hmac, ts)
WHERE NOT j.reinitialized OR coalesce(l.n, 0) > 0

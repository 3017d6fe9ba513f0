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
-- facts: proxy.initialize, proxy.principal|proxy.client_addr
-- units: proxy WHERE dead_session(status, session_hmac, method, $dead_statuses)
-- params: reinit_window_s, dead_statuses
-- unit: (session_hmac, ts of the 404)
-- page: sessions
WITH p AS (
    SELECT *, coalesce(principal, client_addr || '|' || coalesce(user_agent, '')) AS client
    FROM proxy
),
gone AS (
    SELECT * FROM p
    WHERE dead_session(status, session_hmac, method, $dead_statuses)
)
SELECT g.session_hmac, 'high' AS severity, g.ts,
       json_object(
           'reinitialized', EXISTS (
               SELECT 1 FROM p i
                WHERE i.client = g.client AND i.jsonrpc_method = 'initialize'
                  AND i.session_hmac IS NULL AND i.ts > g.ts
                  AND epoch_ms(i.ts) - epoch_ms(g.ts) <= $reinit_window_s * 1000),
           'later_requests', (SELECT count(*) FROM p l
                               WHERE l.session_hmac = g.session_hmac AND l.ts > g.ts
                                 AND l.method <> 'DELETE')) AS detail
FROM gone g
WHERE NOT EXISTS (
        SELECT 1 FROM p i
         WHERE i.client = g.client AND i.jsonrpc_method = 'initialize'
           AND i.session_hmac IS NULL AND i.ts > g.ts
           AND epoch_ms(i.ts) - epoch_ms(g.ts) <= $reinit_window_s * 1000)
   OR EXISTS (
        SELECT 1 FROM p l
         WHERE l.session_hmac = g.session_hmac AND l.ts > g.ts AND l.method <> 'DELETE')

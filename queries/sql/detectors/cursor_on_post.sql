-- name: cursor_on_post
-- invariant: only a resuming GET carries Last-Event-ID; servers ignore a cursor on a POST, so a client that sends it there never resumes
-- failure: A client sends Last-Event-ID on every JSON-RPC POST and never on the reconnecting
--   GET: servers ignore a cursor on a POST, so replay never happens.
-- reports: simonx1/ruby-mcp-client PR 168 (Last-Event-ID sent on every POST, never on the
--   reconnecting GET)
-- dashboard: Sessions & proxy: a `low` row per session (or client) with the POSTs that carried
--   a cursor and how many GETs resumed with one (`get_resumes`: 0 is the tell).
-- fix: Send Last-Event-ID only on the GET that resumes a stream, with the id of the last event
--   accepted on that stream.
-- severity: low
-- needs: proxy
-- unit: session_hmac (else principal, else client_addr)
-- page: sessions
-- facts: proxy.last_event_id
-- units: proxy WHERE method = 'POST' AND has_resumption(protocol_version) BY coalesce(session_hmac, principal, client_addr, '')
-- A log that cannot show Last-Event-ID cannot show a cursor on a POST: its POSTs are
-- `cannot_tell`, not clean.
-- Requests of 2026-07-28 or later are left to obsolete_resume: that revision has no
-- resumption at all, so there a cursor is wrong on any method.
WITH posts AS (
    SELECT *, CASE WHEN session_hmac IS NULL THEN coalesce(principal, client_addr) END AS client
    FROM proxy
    WHERE method = 'POST' AND last_event_id IS NOT NULL
      AND has_resumption(protocol_version)
),
get_resumes AS (
    SELECT session_hmac, count(*) AS n
    FROM proxy
    WHERE method = 'GET' AND last_event_id IS NOT NULL AND session_hmac IS NOT NULL
    GROUP BY ALL
)
SELECT p.session_hmac, 'low' AS severity, min(p.ts) AS ts,
       json_object('client', min(p.client), 'posts', count(*),
                   'jsonrpc_methods', list(DISTINCT p.jsonrpc_method ORDER BY p.jsonrpc_method)
                       FILTER (WHERE p.jsonrpc_method IS NOT NULL),
                   'get_resumes', coalesce(min(g.n), 0)) AS detail
FROM posts p
LEFT JOIN get_resumes g USING (session_hmac)
WHERE p.session_hmac IS NOT NULL OR p.client IS NOT NULL
GROUP BY p.session_hmac, p.client

-- name: origin_refused_not_403
-- invariant: an MCP request with an Origin outside the configured allow-list is refused with 403
-- failure: A foreign Origin is refused, but with another status (421 for its Host, 404 or 400
--   from session routing that runs before the Origin check): safe, but not what the
--   transport specification asks for, and a client cannot tell why it was turned away.
-- reports: the Python SDK checks Host before Origin (421); the TypeScript SDK's examples route
--   by session (404/400) before their Origin check
-- dashboard: Sessions & proxy lists a `low` row per request with its Origin and status.
-- fix: Check Origin first and answer 403 to an Origin outside the allow-list.
-- severity: low
-- needs: proxy
-- facts: proxy.origin
-- units: proxy
-- params: origin_patterns, origin_configured
-- unit: proxy request (ts, session_hmac, origin)
-- page: sessions
-- Not gated: the request was refused, which is what protects the server.
SELECT DISTINCT session_hmac, 'low' AS severity, ts,
       json_object('origin', origin, 'status', status, 'method', method,
                   'jsonrpc_method', jsonrpc_method) AS detail
FROM proxy
WHERE is_mcp_request(method) AND is_refused(status) AND status <> 403
  AND origin_invalid(origin, $origin_patterns, $origin_configured)

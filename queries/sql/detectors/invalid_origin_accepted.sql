-- name: invalid_origin_accepted
-- invariant: an MCP request with an Origin outside the configured allow-list is refused (any 4xx)
-- failure: A request with a foreign Origin (DNS rebinding, a proxy that rewrites or strips
--   Origin) is served instead of refused.
-- dashboard: Overview: the `invalid_origin_rejection` gate fails; Sessions & proxy lists a
--   `critical` row per request with its Origin.
-- fix: Validate Origin against an allow-list on every request and answer 403; make sure the
--   proxy passes the header through unchanged.
-- severity: critical
-- needs: proxy
-- facts: proxy.origin
-- units: proxy
-- params: origin_patterns, origin_configured
-- unit: proxy request (ts, session_hmac, origin)
-- page: sessions
-- Served is a 2xx or 3xx: a refusal by Host (421) or by session routing (404, 400) before
-- the Origin check still refused the request, and a 5xx cannot tell. A CORS preflight
-- (OPTIONS) is the web framework's, not an MCP request. With no allow-list configured a
-- foreign Origin cannot be judged: nothing here, the gate says so.
SELECT DISTINCT session_hmac, 'critical' AS severity, ts,
       json_object('origin', origin, 'status', status, 'method', method,
                   'jsonrpc_method', jsonrpc_method) AS detail
FROM proxy
WHERE is_mcp_request(method) AND is_served(status)
  AND origin_invalid(origin, $origin_patterns, $origin_configured)

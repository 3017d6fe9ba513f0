-- name: allowed_origin_refused
-- invariant: an MCP request whose Origin is on the allow-list (or absent) is not refused as a foreign origin (403), nor one with an allowed Origin as a foreign host (421)
-- failure: A release locks out real clients: its Origin or Host check refuses origins on the
--   allow-list, or requests without an Origin (native clients send none).
-- dashboard: Overview: the `allowed_origin_refusals` gate fails; Sessions & proxy lists a
--   `high` row per request with its Origin and status.
-- fix: Give the server the same allow-list (and allowed hosts) as the deployment; behind a
--   proxy, pass Host and Origin through unchanged.
-- severity: high
-- needs: proxy
-- facts: proxy.origin
-- units: proxy
-- params: origin_patterns
-- unit: proxy request (ts, session_hmac, origin)
-- page: sessions
SELECT DISTINCT session_hmac, 'high' AS severity, ts,
       json_object('origin', origin, 'status', status, 'method', method,
                   'jsonrpc_method', jsonrpc_method) AS detail
FROM proxy
-- A 421 answers the Host, which an access log does not show: without an Origin it may be a
-- DNS-rebinding probe refused as it should be (the Python SDK checks Host first).
-- The status first: the allow-list's patterns are matched only for the few refused rows
-- (matched for every request, they were 95 % of the detector's CPU).
WHERE (status = 403 OR (status = 421 AND origin IS NOT NULL))
  AND is_mcp_request(method) AND origin_ok(origin, $origin_patterns)

-- name: invalid_origin_accepted
-- invariant: a request with an Origin outside the allow-list is answered 403
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
-- params: origin_patterns
-- unit: proxy request (ts, session_hmac, origin)
-- page: sessions
SELECT DISTINCT session_hmac, 'critical' AS severity, ts,
       json_object('origin', origin, 'status', status, 'method', method,
                   'jsonrpc_method', jsonrpc_method) AS detail
FROM proxy
WHERE origin IS NOT NULL AND status <> 403
  AND NOT origin_allowed(origin, $origin_patterns)

-- name: invalid_origin_accepted
-- invariant: a request with an Origin outside the allow-list is answered 403
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

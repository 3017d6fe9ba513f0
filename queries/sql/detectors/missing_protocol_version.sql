-- name: missing_protocol_version
-- invariant: every request on a session carries MCP-Protocol-Version
-- failure: A client omits MCP-Protocol-Version after initialize, so the server falls back to a
--   default revision and may serve the wrong semantics.
-- dashboard: Sessions & proxy: a `low` row per session with the count of requests without the
--   header.
-- fix: Send the negotiated MCP-Protocol-Version on every request after initialize.
-- severity: low
-- needs: proxy
-- facts: proxy.protocol_version, proxy.session_hmac
-- units: proxy WHERE session_hmac IS NOT NULL BY session_hmac
-- unit: session_hmac
-- page: sessions
SELECT session_hmac, 'low' AS severity, min(ts) AS ts,
       json_object('requests_without_version', count(*)) AS detail
FROM proxy
WHERE session_hmac IS NOT NULL AND protocol_version IS NULL
GROUP BY session_hmac

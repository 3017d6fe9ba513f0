-- name: raw_session_id_logged
-- invariant: no log carries a raw Mcp-Session-Id (they were hashed on ingest; the value is not kept)
-- failure: A proxy or server logs the raw Mcp-Session-Id, which is a bearer credential for the
--   session.
-- dashboard: Overview: the `raw_session_ids` gate fails; Sessions & proxy lists a `critical`
--   row per file (never the value).
-- fix: Log the HMAC of the session id or drop the header from access logs (see
--   docs/sources.md), and rotate the exposed sessions.
-- severity: critical
-- needs: proxy
-- facts: none
-- unit: source file
-- page: sessions
SELECT 'critical' AS severity, min(p.ts) AS ts,
       json_object('file', min(f.name), 'path', min(f.path), 'count', count(*))
           AS detail
FROM proxy p JOIN files f USING (file_id)
WHERE p.raw_session_id
GROUP BY p.file_id

-- name: obsolete_resume
-- invariant: clients on 2026-07-28 or later never send Last-Event-ID (that revision has no resumption)
-- severity: low
-- needs: proxy
-- facts: proxy.protocol_version, proxy.last_event_id
-- units: proxy WHERE last_event_id IS NOT NULL OR protocol_version >= '2026-07-28' BY coalesce(principal, client_addr, '')
-- unit: principal (else client_addr)
-- page: sessions
SELECT 'low' AS severity, min(ts) AS ts,
       json_object('client', coalesce(principal, client_addr), 'requests', count(*),
                   'protocol_versions', list(DISTINCT protocol_version)) AS detail
FROM proxy
WHERE NOT has_resumption(protocol_version) AND last_event_id IS NOT NULL
GROUP BY coalesce(principal, client_addr)

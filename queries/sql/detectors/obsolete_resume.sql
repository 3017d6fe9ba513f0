-- name: obsolete_resume
-- invariant: clients on 2026-07-28 or later never send Last-Event-ID (that revision has no resumption)
-- failure: A client on the 2026-07-28 revision still sends Last-Event-ID, although that
--   revision has no resumption: it believes a broken request can be resumed.
-- dashboard: Sessions & proxy: a `low` row per client (principal or address).
-- fix: On 2026-07-28 and later, re-send a broken request with its idempotency key instead of
--   resuming.
-- severity: low
-- needs: proxy
-- facts: proxy.protocol_version, proxy.last_event_id
-- units: proxy WHERE last_event_id IS NOT NULL OR protocol_version >= sessionless_revision() BY coalesce(principal, client_addr, '')
-- unit: principal (else client_addr)
-- page: sessions
SELECT 'low' AS severity, min(ts) AS ts,
       json_object('client', coalesce(principal, client_addr), 'requests', count(*),
                   'protocol_versions', list(DISTINCT protocol_version ORDER BY protocol_version)) AS detail
FROM proxy
WHERE NOT has_resumption(protocol_version) AND last_event_id IS NOT NULL
GROUP BY coalesce(principal, client_addr)

-- name: duplicate_delivery_accepted
-- invariant: a dedup key (generation, stream_id, event_id, message_digest) is accepted at most once
-- severity: high
-- needs: inbox
-- unit: dedup key
SELECT session_hmac, generation, stream_id, event_id, 'high' AS severity, min(ts) AS ts,
       json_object('accepted', count(*), 'message_digest', message_digest,
                   'deliveries', list(delivery ORDER BY ts)) AS detail
FROM inbox
WHERE verdict = 'accepted'
GROUP BY session_hmac, generation, stream_id, event_id, message_digest
HAVING count(*) >= 2

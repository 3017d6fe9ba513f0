-- name: duplicate_delivery_accepted
-- invariant: a dedup key (generation, stream_id, event_id, message_digest) is accepted at most once
-- severity: high
-- needs: inbox
-- facts: none
-- unit: dedup key
-- page: streams
-- Keys are first counted by a 64-bit hash (cheap); only colliding hashes are grouped by
-- the full key, so a hash collision can never make a finding.
WITH keyed AS (
    SELECT hash(session_hmac, generation, stream_id, event_id, message_digest) AS k, *
    FROM inbox
    WHERE verdict = 'accepted'
),
repeated AS (
    SELECT k FROM keyed GROUP BY k HAVING count(*) >= 2
)
SELECT session_hmac, generation, stream_id, event_id, 'high' AS severity, min(ts) AS ts,
       json_object('accepted', count(*), 'message_digest', message_digest,
                   'deliveries', list(delivery ORDER BY ts)) AS detail
FROM keyed SEMI JOIN repeated USING (k)
GROUP BY session_hmac, generation, stream_id, event_id, message_digest
HAVING count(*) >= 2

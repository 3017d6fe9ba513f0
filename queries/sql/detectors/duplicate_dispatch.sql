-- name: duplicate_dispatch
-- invariant: one logical operation causes at most one executed side effect
-- severity: critical
-- needs: dispatches
-- params: retry_window_s
-- unit: logical operation (per basis: key and payload / inbox dedup key / principal, tool and payload)
-- page: dispatch
-- Basis `retry`: a write re-sent after its first attempt's stream broke (or its request
-- failed) executed again under a different or no idempotency key.
WITH executed AS (
    SELECT * FROM dispatches WHERE outcome = 'executed'
),
by_key AS (
    SELECT 'idempotency_key' AS basis, min(session_hmac) AS session_hmac,
           min(generation) AS generation, NULL AS stream_id, NULL AS event_id,
           arg_min(dispatch_id, ts) AS dispatch_id, idempotency_key, min(ts) AS ts,
           list(dispatch_id ORDER BY ts) AS dispatches
    FROM executed
    WHERE idempotency_key IS NOT NULL
    GROUP BY idempotency_key, payload_digest
    HAVING count(*) >= 2
),
by_inbox AS (
    SELECT 'inbox' AS basis, session_hmac, generation, stream_id, event_id,
           min(dispatch_id) AS dispatch_id, NULL AS idempotency_key, min(ts) AS ts,
           list(DISTINCT dispatch_id) AS dispatches
    FROM inbox
    WHERE verdict = 'accepted' AND dispatch_id IS NOT NULL
    GROUP BY session_hmac, generation, stream_id, event_id, message_digest
    HAVING count(DISTINCT dispatch_id) >= 2
),
broken AS (
    -- first attempts whose response stream broke, or whose request failed
    SELECT d.*
    FROM executed d
    WHERE d.tool_class IN ('write', 'paid')
      AND (coalesce(d.http_status, 200) >= 400
           OR EXISTS (SELECT 1 FROM a_streams s
                       WHERE s.session_hmac = d.session_hmac AND s.generation = d.generation
                         AND s.request_id = d.request_id AND s.disconnected))
),
by_retry AS (
    SELECT 'retry' AS basis, a.session_hmac, a.generation, NULL AS stream_id,
           NULL AS event_id, a.dispatch_id, NULL AS idempotency_key, a.ts,
           list_prepend(a.dispatch_id, list(b.dispatch_id ORDER BY b.ts)) AS dispatches
    FROM broken a
    JOIN executed b
      ON b.principal = a.principal AND b.tool_name = a.tool_name
     AND b.payload_digest = a.payload_digest
     AND b.ts > a.ts
     AND epoch_ms(b.ts) - epoch_ms(a.ts) <= $retry_window_s * 1000
     AND (b.idempotency_key IS NULL OR b.idempotency_key IS DISTINCT FROM a.idempotency_key)
    -- a re-send of a re-send is the same logical operation as its first attempt
    WHERE NOT EXISTS (
        SELECT 1 FROM executed z
         WHERE z.principal = a.principal AND z.tool_name = a.tool_name
           AND z.payload_digest = a.payload_digest AND z.ts < a.ts
           AND epoch_ms(a.ts) - epoch_ms(z.ts) <= $retry_window_s * 1000)
    GROUP BY a.session_hmac, a.generation, a.dispatch_id, a.ts
)
SELECT session_hmac, generation, stream_id, event_id, dispatch_id, idempotency_key, ts,
       'critical' AS severity,
       json_object('basis', basis, 'dispatches', dispatches) AS detail
FROM (SELECT * FROM by_key UNION ALL SELECT * FROM by_inbox UNION ALL SELECT * FROM by_retry)

-- name: duplicate_dispatch
-- invariant: one logical operation causes at most one executed side effect
-- failure: A client treats a dropped transport as a failed call and replays a non-idempotent
--   `tools/call` under a new request id (and no or a new idempotency key): the write executes
--   twice.
-- reports: smg-project/smg PR 2441, odysseus-dev/odysseus PR 6150, QwenLM/qwen-code issue 5381,
--   intent-hq/intent issue 1530 (non-idempotent tool calls replayed after a transport drop)
-- dashboard: Overview: the `duplicate_dispatches` gate fails; Dispatch & idempotency shows the
--   share by basis and a `critical` row per logical operation (`high` for basis `suspected`).
-- fix: Send an idempotency key with every write and reuse it on a re-send; the server returns
--   the first execution's receipt for a repeated key; a broken stream is resumed, not
--   re-posted.
-- severity: critical, high
-- needs: dispatches
-- params: retry_window_s, resend_window_s
-- unit: logical operation (per basis: key and payload / inbox dedup key / first attempt of a re-send)
-- page: dispatch
-- facts: dispatches.payload_digest
-- undecided: same payload
-- units: dispatches WHERE outcome = 'executed' AND is_write(tool_class) BY dispatch_id
-- Basis `idempotency_key`: one key and payload executed twice. Basis `inbox`: one accepted
-- dedup key dispatched twice. Basis `retry`: a write re-sent after its first attempt broke
-- executed again under a different or no key; the first attempt broke when its stream
-- went DISCONNECTED, its dispatch record says status >= 400, or a proxy logged 4xx/5xx/499
-- for the same (session, else principal) and request id within the retry window — one
-- source alone often cannot see the break. Basis `suspected` (high, not gated): a keyless
-- write executed twice for the same session (else principal), tool and payload, the
-- second starting within the re-send window of the end of the first, with no evidence of
-- a break: what a blind re-send looks like to a server whose proxies log 200.
-- The re-send bases match attempts by payload digest: a dispatch file that records none
-- cannot show a re-send, so its executed writes are `cannot_tell`, not silently clean.
-- Where another file records digests, a write of that file in no finding whose key, or
-- whose re-send, may be one of the blind file's executions (a_blind_dispatches: the same
-- key at any time; the same sender and tool within the retry window, the earlier one
-- broken, which a blind one may have; both keyless, the same caller and tool within the
-- re-send window) is `cannot_tell` too ("same payload"), naming the first such file.
-- Nothing of the size of the executions is kept between the parts of this query: each use
-- reads the executed writes from `dispatches` with its own filter (a kept copy of every
-- execution, read three times, and of every write, read eight, spilled at 10M events under a
-- tenth of the memory limit: x30 from 10M to 100M), and whatever is compared pairwise is
-- first narrowed to its few candidates: the broken writes, the executions of a broken write's
-- tool and payload (its re-sends and earlier attempts), the keyless writes and the blind
-- files' executions. Whether a write's stream broke is looked up among the streams that
-- disconnected, and the span of the streams of a request (`spans`) only for the keyless
-- writes and the blind files' executions, the two bases that compare it.
WITH writes AS NOT MATERIALIZED (
    SELECT dispatch_id, ts, session_hmac, generation, request_id, principal, idempotency_key,
           payload_digest, tool_name, http_status,
           dispatch_sender(principal, session_hmac) AS sender
    FROM dispatches
    WHERE outcome = 'executed' AND is_write(tool_class)
),
broke_streams AS (
    SELECT DISTINCT session_hmac, generation, request_id
    FROM a_streams
    WHERE disconnected AND request_id IS NOT NULL
),
keyless_writes AS (
    SELECT * FROM writes
    WHERE idempotency_key IS NULL OR trim(idempotency_key) = ''
),
spans AS (
    SELECT session_hmac, generation, request_id, min(opened_ts) AS opened_ts,
           max(last_ts) AS last_ts
    FROM a_streams s
    SEMI JOIN (SELECT session_hmac, generation, request_id FROM keyless_writes
               UNION ALL
               SELECT session_hmac, generation, request_id FROM a_blind_dispatches
               WHERE outcome = 'executed') k
      ON k.session_hmac = s.session_hmac AND k.generation = s.generation
     AND k.request_id = s.request_id
    GROUP BY ALL
),
proxy_broke AS (
    SELECT d.dispatch_id
    FROM writes d
    JOIN proxy p ON p.request_id = d.request_id AND p.session_hmac = d.session_hmac
    WHERE p.status >= 400
      AND abs(epoch_ms(p.ts) - epoch_ms(d.ts)) <= $retry_window_s * 1000
    UNION
    -- Sessionless writes: the failed proxy request of the same principal and request id
    -- nearest in time, before or after, from one ordered pass over the writes and the
    -- failures of each (principal, request id). Request ids repeat across sessions ("0",
    -- "1", ...) and a principal stands for many sessions, so pairing every write with
    -- every failure of its group grows with the square of the group.
    SELECT dispatch_id
    FROM (SELECT dispatch_id, ts, fail_ts,
                 max(fail_ts) OVER (PARTITION BY principal, request_id ORDER BY ts
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                     AS before_ts,
                 min(fail_ts) OVER (PARTITION BY principal, request_id ORDER BY ts
                                    ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)
                     AS after_ts
          FROM (SELECT principal, request_id, ts, dispatch_id, NULL::TIMESTAMP AS fail_ts
                FROM writes
                WHERE session_hmac IS NULL AND principal IS NOT NULL
                  AND request_id IS NOT NULL AND ts IS NOT NULL
                UNION ALL
                -- (only the groups of a sessionless write: no other group returns a row)
                SELECT principal, request_id, ts, NULL, ts
                FROM proxy p
                SEMI JOIN (SELECT principal, request_id FROM writes
                           WHERE session_hmac IS NULL) w USING (principal, request_id)
                WHERE status >= 400 AND principal IS NOT NULL AND request_id IS NOT NULL
                  AND ts IS NOT NULL))
    WHERE fail_ts IS NULL AND dispatch_id IS NOT NULL
      AND (epoch_ms(ts) - epoch_ms(before_ts) <= $retry_window_s * 1000
           OR epoch_ms(after_ts) - epoch_ms(ts) <= $retry_window_s * 1000)
),
broken AS (
    SELECT w.dispatch_id, w.ts, w.session_hmac, w.generation, w.idempotency_key,
           w.payload_digest, w.tool_name, w.sender,
           list_value(CASE WHEN b.request_id IS NOT NULL THEN 'stream_disconnected' END,
                      CASE WHEN coalesce(w.http_status, 200) >= 400 THEN 'dispatch_status' END,
                      CASE WHEN pb.dispatch_id IS NOT NULL THEN 'proxy_status' END)
               .list_filter(lambda x: x IS NOT NULL) AS evidence
    FROM writes w
    LEFT JOIN broke_streams b
      ON b.session_hmac = w.session_hmac AND b.generation = w.generation
     AND b.request_id = w.request_id
    LEFT JOIN proxy_broke pb USING (dispatch_id)
    WHERE b.request_id IS NOT NULL OR coalesce(w.http_status, 200) >= 400
       OR pb.dispatch_id IS NOT NULL
),
-- The executions a broken write's re-send, or an earlier attempt of it, may be: those of a
-- broken write's tool and payload (a semi join with the broken writes, a superset of their
-- senders' groups). Joining the broken writes with every execution built its hash table of
-- the executions.
related AS (
    SELECT d.dispatch_id, d.ts, d.idempotency_key, d.tool_name, d.payload_digest,
           dispatch_sender(d.principal, d.session_hmac) AS sender
    FROM dispatches d
    SEMI JOIN broken a ON a.tool_name = d.tool_name AND a.payload_digest = d.payload_digest
    WHERE d.outcome = 'executed'
),
-- The key and receipt groupings hash their wide keys first: only the rows whose 64-bit
-- hash repeats (a superset of the real groups of two or more) are grouped by the full key.
-- The hashes leave the digests out (the same superset, larger by the rows that differ only
-- in them): hashing 64 hexadecimal characters per row was most of their cost. The repeated
-- hashes are found by sorting them (a hash equal to the next one in order repeats), as the
-- event index finds its repeated ids: a grouping of the hashes held a group per key or
-- receipt (14.3M receipts at 100M events) and grew x16-41 from 10M to 100M.
key_repeats AS (
    SELECT DISTINCT h
    FROM (SELECT h, lead(h) OVER (ORDER BY h) AS next_h
          FROM (SELECT hash(idempotency_key) AS h
                FROM dispatches
                WHERE outcome = 'executed' AND idempotency_key IS NOT NULL))
    WHERE h = next_h
),
by_key AS (
    SELECT 'idempotency_key' AS basis, min(session_hmac) AS session_hmac,
           min(generation) AS generation, NULL AS stream_id, NULL AS event_id,
           idempotency_key, min(ts) AS ts,
           list(dispatch_id ORDER BY ts, dispatch_id) AS dispatches, NULL::VARCHAR[] AS evidence
    FROM dispatches d
    SEMI JOIN key_repeats k ON hash(d.idempotency_key) = k.h
    WHERE outcome = 'executed' AND idempotency_key IS NOT NULL
    GROUP BY idempotency_key, payload_digest
    HAVING count(*) >= 2
),
-- The receipts whose hash repeats are found by their place (file id, position), carried
-- through the sort of the hashes: a receipt whose hash equals its neighbour's in that order
-- repeats. The columns the grouping adds are read last, for those places alone, which
-- DuckDB's scan applies before reading them. A place that were not one row's could only add
-- rows of keys not repeated, which the HAVING drops: every row of a repeated key is found.
receipt_found AS (
    SELECT file_id, pos
    FROM (SELECT file_id, pos, h, lag(h) OVER (ORDER BY h) AS prev_h,
                 lead(h) OVER (ORDER BY h) AS next_h
          FROM (SELECT hash(session_hmac, generation, stream_id, event_id) AS h, file_id, pos
                FROM inbox
                WHERE verdict = 'accepted' AND dispatch_id IS NOT NULL))
    WHERE h = prev_h OR h = next_h
),
by_inbox AS (
    SELECT 'inbox' AS basis, session_hmac, generation, stream_id, event_id,
           min(dispatch_id) AS dispatch_id, NULL AS idempotency_key, min(ts) AS ts,
           list(DISTINCT dispatch_id ORDER BY dispatch_id) AS dispatches,
           NULL::VARCHAR[] AS evidence
    FROM inbox i
    SEMI JOIN receipt_found USING (file_id, pos)
    WHERE verdict = 'accepted' AND dispatch_id IS NOT NULL
    GROUP BY session_hmac, generation, stream_id, event_id, message_digest
    HAVING count(DISTINCT dispatch_id) >= 2
),
by_retry AS (
    SELECT 'retry' AS basis, a.session_hmac, a.generation, NULL AS stream_id,
           NULL AS event_id, a.dispatch_id, NULL AS idempotency_key, a.ts,
           list_prepend(a.dispatch_id, list(b.dispatch_id ORDER BY b.ts, b.dispatch_id))
               AS dispatches,
           min(a.evidence) AS evidence
    FROM broken a
    JOIN related b
      ON b.sender = a.sender AND b.tool_name = a.tool_name
     AND b.payload_digest = a.payload_digest
     AND b.ts > a.ts
     AND epoch_ms(b.ts) - epoch_ms(a.ts) <= $retry_window_s * 1000
     AND (b.idempotency_key IS NULL OR b.idempotency_key IS DISTINCT FROM a.idempotency_key)
    -- a re-send of a re-send is the same logical operation as its first attempt
    WHERE NOT EXISTS (
        SELECT 1 FROM related z
         WHERE z.sender = a.sender AND z.tool_name = a.tool_name
           AND z.payload_digest = a.payload_digest AND z.ts < a.ts
           AND epoch_ms(a.ts) - epoch_ms(z.ts) <= $retry_window_s * 1000)
    GROUP BY a.session_hmac, a.generation, a.dispatch_id, a.ts
),
keyless AS (
    SELECT w.*, dispatch_caller(w.principal, w.session_hmac) AS caller,
           coalesce(s.opened_ts, w.ts) AS start_ts, coalesce(s.last_ts, w.ts) AS end_ts
    FROM keyless_writes w
    LEFT JOIN spans s
      ON s.session_hmac = w.session_hmac AND s.generation = w.generation
     AND s.request_id = w.request_id
),
by_suspicion AS (
    SELECT 'suspected' AS basis, a.session_hmac, a.generation, NULL AS stream_id,
           NULL AS event_id, a.dispatch_id, NULL AS idempotency_key, a.ts,
           list_prepend(a.dispatch_id, list(b.dispatch_id ORDER BY b.ts, b.dispatch_id))
               AS dispatches,
           NULL::VARCHAR[] AS evidence
    FROM keyless a
    JOIN keyless b
      ON b.caller = a.caller AND b.tool_name = a.tool_name
     AND b.payload_digest = a.payload_digest
     AND (b.ts, b.dispatch_id) > (a.ts, a.dispatch_id)
     AND epoch_ms(b.start_ts) - epoch_ms(a.end_ts) <= $resend_window_s * 1000
    WHERE a.dispatch_id NOT IN (SELECT dispatch_id FROM broken)
      AND NOT EXISTS (
        SELECT 1 FROM keyless z
         WHERE z.caller = a.caller AND z.tool_name = a.tool_name
           AND z.payload_digest = a.payload_digest
           AND (z.ts, z.dispatch_id) < (a.ts, a.dispatch_id)
           AND epoch_ms(a.start_ts) - epoch_ms(z.end_ts) <= $resend_window_s * 1000)
    GROUP BY a.session_hmac, a.generation, a.dispatch_id, a.ts
),
found AS (
SELECT session_hmac, generation, stream_id, event_id, dispatch_id, idempotency_key, ts,
       dispatches,
       CASE WHEN basis = 'suspected' THEN 'high' ELSE 'critical' END AS severity,
       CASE WHEN basis = 'suspected' THEN
           json_object('basis', basis, 'dispatches', dispatches,
                       'confirm_with', 'client inbox receipts, or a proxy log that records '
                                       || 'client aborts (499) with the JSON-RPC request id')
       WHEN basis = 'retry' THEN
           json_object('basis', basis, 'dispatches', dispatches, 'broke', evidence)
       ELSE json_object('basis', basis, 'dispatches', dispatches) END AS detail
FROM (SELECT basis, session_hmac, generation, stream_id, event_id,
             dispatches[1] AS dispatch_id, idempotency_key, ts, dispatches, evidence
      FROM by_key
      UNION ALL SELECT * FROM by_inbox UNION ALL SELECT * FROM by_retry
      UNION ALL SELECT * FROM by_suspicion)
),
-- `dispatches` here holds only the files that show digests (the capability plan shadows
-- it), so the blind files' executions come from a_blind_dispatches and are given their
-- stream's span and sender again.
blind AS (
    SELECT b.*, coalesce(s.opened_ts, b.ts) AS start_ts, coalesce(s.last_ts, b.ts) AS end_ts,
           dispatch_sender(b.principal, b.session_hmac) AS sender,
           dispatch_caller(b.principal, b.session_hmac) AS caller
    FROM a_blind_dispatches b
    LEFT JOIN spans s
      ON s.session_hmac = b.session_hmac AND s.generation = b.generation
     AND s.request_id = b.request_id
    WHERE b.outcome = 'executed'
),
maybe_same AS (
    SELECT x.dispatch_id, w.file_id, w.path
    FROM writes x JOIN blind w ON w.idempotency_key = x.idempotency_key
    UNION ALL
    SELECT x.dispatch_id, w.file_id, w.path
    FROM writes x JOIN blind w
      ON w.sender = x.sender AND w.tool_name = x.tool_name
     AND abs(epoch_ms(w.ts) - epoch_ms(x.ts)) <= $retry_window_s * 1000
    WHERE (w.ts <= x.ts AND is_write(w.tool_class))
       OR (w.ts >= x.ts AND x.dispatch_id IN (SELECT dispatch_id FROM broken))
    UNION ALL
    SELECT x.dispatch_id, w.file_id, w.path
    FROM keyless x JOIN blind w
      ON w.caller = x.caller AND w.tool_name = x.tool_name
    WHERE is_write(w.tool_class)
      AND (w.idempotency_key IS NULL OR trim(w.idempotency_key) = '')
      AND (w.ts >= x.ts AND epoch_ms(w.start_ts) - epoch_ms(x.end_ts) <= $resend_window_s * 1000
           OR w.ts <= x.ts
              AND epoch_ms(x.start_ts) - epoch_ms(w.end_ts) <= $resend_window_s * 1000)
)
SELECT session_hmac, generation, stream_id, event_id, dispatch_id, idempotency_key, ts,
       severity, detail
FROM found
UNION ALL
SELECT x.session_hmac, x.generation, NULL, NULL, x.dispatch_id, x.idempotency_key, x.ts,
       'cannot_tell',
       json_object('missing', 'same payload', 'file_id', arg_min(m.file_id, m.path))
FROM maybe_same m
JOIN writes x USING (dispatch_id)
ANTI JOIN (SELECT unnest(dispatches) AS dispatch_id FROM found) f ON f.dispatch_id = x.dispatch_id
GROUP BY x.session_hmac, x.generation, x.dispatch_id, x.idempotency_key, x.ts

-- name: macros
-- purpose: the constants and predicates that prepare, detector, gate and dashboard queries
--          share; each rule is written here once and nowhere else
-- needs:
-- The revision that removed sessions and resumption (seed 000).
CREATE OR REPLACE MACRO sessionless_revision() AS '2026-07-28';

-- Resumption exists for a negotiated revision older than that; unknown counts as older.
CREATE OR REPLACE MACRO has_resumption(protocol_version) AS
    coalesce(protocol_version, '0000') < sessionless_revision();

-- The revision a record belongs to: records without a session can only be sessionless.
CREATE OR REPLACE MACRO record_revision(session_hmac, protocol_version) AS
    CASE WHEN session_hmac IS NULL THEN sessionless_revision()
         ELSE coalesce(protocol_version, 'unknown') END;

-- Who sent a proxy record: its principal, else its address and User-Agent; null when the
-- record names neither (reinit_missing, a_blind_clients).
CREATE OR REPLACE MACRO proxy_client(principal, client_addr, user_agent) AS
    CASE WHEN principal IS NOT NULL THEN 'p:' || principal
         WHEN client_addr IS NOT NULL THEN 'a:' || client_addr || '|' || coalesce(user_agent, '')
    END;

-- Who re-sends a write (duplicate_dispatch, basis `retry`): the principal across its
-- sessions, else the session; null when the record names neither.
CREATE OR REPLACE MACRO dispatch_sender(principal, session_hmac) AS
    CASE WHEN principal IS NOT NULL THEN 'p:' || principal
         WHEN session_hmac IS NOT NULL THEN 's:' || session_hmac END;

-- Who re-sends blindly (duplicate_dispatch, basis `suspected`): the session, else the
-- principal.
CREATE OR REPLACE MACRO dispatch_caller(principal, session_hmac) AS
    CASE WHEN session_hmac IS NOT NULL THEN 's:' || session_hmac
         WHEN principal IS NOT NULL THEN 'p:' || principal END;

-- A record's place in its log's order, (ts, file_id, pos), as one number: its microsecond
-- epoch, then its file, then its position. arg_min/arg_max by the struct itself make a sort
-- key of it per row and aggregate and keep one per group (a_streams' six of them were most
-- of its time and memory at 10M events); by this number they compare integers. Exact for
-- file ids below 2^24 and positions below 2^40: a record beyond stops the analysis rather
-- than being put out of order. (On Spark it is the struct: spark/transpile.py.)
CREATE OR REPLACE MACRO record_order(ts, file_id, pos) AS
    CASE WHEN file_id < 0 OR file_id >= 16777216 OR pos < 0 OR pos >= 1099511627776
         THEN error('record_order(): a file id or line position too large to order exactly')
         ELSE epoch_us(ts)::HUGEINT * 18446744073709551616
              + file_id::HUGEINT * 1099511627776 + pos END;

-- A reconnect as the load budget counts it: a resuming GET, a GET re-opening a stream on
-- a session that already had one without a cursor (the TypeScript SDK's standalone GET
-- stream has no priming event, so its clients re-open it without Last-Event-ID), or a
-- request turned away with 429 or 503 (the client will come back). `reopened`: the GET
-- came after its session's first (reopens).
CREATE OR REPLACE MACRO is_reconnect(method, last_event_id, status, reopened) AS
    (method = 'GET' AND (last_event_id IS NOT NULL OR reopened))
    OR status IN (429, 503);
-- A session's first GET (an aggregate over its GETs: call it grouped by the session), in
-- time order and, within a millisecond, in the order they were logged (`file_id`, `pos`:
-- otherwise which of two GETs of one millisecond came first, and so whether the second
-- counts, was arbitrary), as record_order packs them.
CREATE OR REPLACE MACRO first_get(ts, file_id, pos) AS min(record_order(ts, file_id, pos));
-- A GET after its session's first (`first_get`: first_get of the session's GETs, NULL for
-- a request without a session, whose re-opens cannot be told) re-opens its stream: any
-- of its GETs but the least (compared for equality, which Spark also has for the struct
-- it writes record_order as). A grouping of the GETs joined back, not a window over every
-- request: a window partitioned by session sorted every request (0.17 of 0.18 CPU s of
-- reconnect_storm at 1M).
CREATE OR REPLACE MACRO reopens(method, ts, file_id, pos, first_get) AS
    coalesce(method = 'GET' AND record_order(ts, file_id, pos) <> first_get, false);

-- An Origin on the allow-list; patterns are LIKE patterns with backslash escapes
-- (queries/params.py turns the configured globs into them).
CREATE OR REPLACE MACRO origin_allowed(origin, patterns) AS
    len(list_filter(patterns, lambda p: like_escape(origin, p, '\'))) > 0;

-- An MCP request: a CORS preflight (OPTIONS) is answered by the web framework in front of
-- the MCP transport, so it is neither refused nor served as MCP.
CREATE OR REPLACE MACRO is_mcp_request(method) AS upper(method) <> 'OPTIONS';

-- Refused: any 4xx (a server checks Host (421), routing (404/400) or Origin (403) in its
-- own order); served: a 2xx or 3xx. A 5xx is neither: a proxy's 502/504 never reached the
-- server, a server's 500 may have processed the request.
CREATE OR REPLACE MACRO is_refused(status) AS status BETWEEN 400 AND 499;
CREATE OR REPLACE MACRO is_served(status) AS status BETWEEN 200 AND 399;

-- An Origin judged invalid: present, and outside an allow-list that was configured. With
-- no allow-list configured the patterns are the loopback origins, and a foreign Origin
-- cannot be judged (origin_unjudged).
CREATE OR REPLACE MACRO origin_invalid(origin, patterns, configured) AS
    origin IS NOT NULL AND configured AND NOT origin_allowed(origin, patterns);
CREATE OR REPLACE MACRO origin_unjudged(origin, patterns, configured) AS
    origin IS NOT NULL AND NOT configured AND NOT origin_allowed(origin, patterns);
-- A request whose Origin is allowed or absent: real clients, which must be served.
CREATE OR REPLACE MACRO origin_ok(origin, patterns) AS
    origin IS NULL OR origin_allowed(origin, patterns);

-- What a server answers for a terminated or unknown session (`dead_session_statuses`): a
-- request naming a session, answered so, that is not the DELETE ending it.
CREATE OR REPLACE MACRO dead_session(status, session_hmac, method, statuses) AS
    list_contains(statuses, status) AND session_hmac IS NOT NULL AND method <> 'DELETE';
-- The same answer as a log can show it: where no row of the log names a request's session
-- (`ids_hidden`: a format that keeps raw ids out, or ids dropped without the HMAC key),
-- any such answer to a request other than a DELETE may be one, and cannot be judged.
CREATE OR REPLACE MACRO dead_session_unit(status, session_hmac, method, statuses, ids_hidden) AS
    list_contains(statuses, status) AND method <> 'DELETE'
    AND (session_hmac IS NOT NULL OR ids_hidden);

-- An answer a proxy served empty: a POST answered 2xx with an event stream of no body
-- bytes (Caddy `size`, nginx `$body_bytes_sent`) never carried its response to the client
-- (the server streams the answer, priming event first, on the POST's own response). A log
-- without the size or the type judges nothing (NULL).
CREATE OR REPLACE MACRO empty_event_stream(method, status, body_bytes_sent, resp_content_type) AS
    upper(method) = 'POST' AND status BETWEEN 200 AND 299 AND body_bytes_sent = 0
    AND lower(resp_content_type) LIKE 'text/event-stream%';
-- A POST answered 2xx with an event stream that a proxy log judges by itself: one that
-- carried bytes, or an empty one the client did not end (`client_closed` false). A client
-- that hung up before the first event leaves the same empty 200 as an answer lost on the
-- way, and only some logs tell them apart (nginx `$request_completion`, Envoy's `DC` flag);
-- where the row cannot (NULL: Caddy, a log without those keys) it judges nothing.
CREATE OR REPLACE MACRO judged_event_stream(method, status, body_bytes_sent, resp_content_type,
                                            client_closed) AS
    upper(method) = 'POST' AND status BETWEEN 200 AND 299 AND body_bytes_sent IS NOT NULL
    AND lower(resp_content_type) LIKE 'text/event-stream%'
    AND (body_bytes_sent > 0 OR client_closed = false);

-- A time inside a window (a stage's, a rollback's hygiene window): from its start, up to
-- and without its end; a window without an end (NULL: still open) has none.
CREATE OR REPLACE MACRO in_window(t, w_start, w_end) AS
    t >= w_start AND t < coalesce(w_end, 'infinity'::TIMESTAMPTZ);

-- Stage attribution, joined against a_stage_windows: a cohort session's record belongs to
-- its stage inside that stage's window, a baseline session's (no cohort) to none, and a
-- record without a known session to the stage whose window it falls in (the stage started
-- last, where releases' windows overlap). A session's cohort is its release when the
-- rollout log names that release (it then counts for each of the release's stages, each in
-- its window), else its stamped rollout_stage (a stage name, of any release).
CREATE OR REPLACE MACRO release_cohort(release) AS '@' || release;
CREATE OR REPLACE MACRO stage_key(session_known, cohort) AS
    CASE WHEN session_known THEN 'cohort:' || cohort ELSE 'window' END;
-- A baseline record: its session is known and in no cohort (the fleet the canary is held
-- against).
CREATE OR REPLACE MACRO is_baseline(session_hmac, cohort) AS
    session_hmac IS NOT NULL AND cohort IS NULL;
CREATE OR REPLACE MACRO attributed(w_key, w_start, w_end, session_known, cohort, t) AS
    w_key = stage_key(session_known, cohort) AND in_window(t, w_start, w_end);
-- The rows of `tbl` (a table or a CTE; no column `stage`) each with its `stage` by that
-- rule at its time `t`: a row per stage whose window holds it, one with NULL for none. The
-- windows are looked up through the spans they cut time into (a_stage_spans, by the cell
-- of `t`: 01_stages.sql), never joined with every window of the record's key (quadratic
-- in the stages). Every stage attribution of a record calls stage_attributed, or its two
-- steps, for a caller that looks the first up once per session rather than per record
-- (the gate facts: a session's records all have its key): stage_grid gives each row of
-- `tbl` the grid of its key (stage_key; rg_key, the grid's origin in epoch ms, its cells'
-- width and last cell: NULL where no window has that key), stage_of the stage of each row
-- of `tbl` that has those columns, at its time `t` (and drops them). (The record's cell
-- is a column before the cells are joined: with the cell an expression of the join, a
-- caller's `WHERE stage IS NOT NULL` let the planner join the grid with the cells first
-- and then every record with all of its key's cells.)
CREATE OR REPLACE MACRO stage_grid(tbl, session_known, cohort) AS TABLE
    SELECT r.*, g.key AS rg_key, epoch_ms(g.origin) AS rg_origin, g.width AS rg_width,
           g.last_cell AS rg_last
    FROM query_table(tbl) r
    LEFT JOIN a_stage_grid g ON g.key = stage_key(session_known, cohort);
CREATE OR REPLACE MACRO stage_of(tbl, t) AS TABLE
    SELECT x.* EXCLUDE (rg_key, rg_origin, rg_width, rg_last, rg_cell), c.stage
    FROM (SELECT r.*, least((epoch_ms(t) - r.rg_origin) // r.rg_width, r.rg_last) AS rg_cell
          FROM query_table(tbl) r) x
    LEFT JOIN a_stage_cells c
      ON c.key = x.rg_key AND c.cell = x.rg_cell AND in_window(t, c.span_start, c.span_end);
CREATE OR REPLACE MACRO stage_attributed(tbl, session_known, cohort, t) AS TABLE
    WITH rg_gridded AS (FROM stage_grid(tbl, session_known, cohort))
    FROM stage_of(rg_gridded, t);

-- Partial blindness: a file that cannot show a fact another file of its record type shows
-- (a_blind_spans, 13_blind_spans.sql) could hold the evidence that decides a unit when
-- its rows span a time within the unit's evidence window [from_ms, to_ms] (epoch ms),
-- widened by the skew between the clocks of a proxy and a server. Such a unit is
-- `cannot_tell` (detail.missing: what could not be seen; detail.file_id: the blind file),
-- never a finding nor a pass.
CREATE OR REPLACE MACRO blind_skew_ms() AS 5000;
CREATE OR REPLACE MACRO blind_could_hold(first_ts, last_ts, from_ms, to_ms) AS
    epoch_ms(first_ts) <= to_ms + blind_skew_ms()
    AND epoch_ms(last_ts) >= from_ms - blind_skew_ms();

-- A finding that counts in its gate: a suspected duplicate dispatch (no evidence that the
-- first attempt broke) is reported, never gated.
CREATE OR REPLACE MACRO gated(detail) AS
    json_extract_string(detail, '$.basis') IS DISTINCT FROM 'suspected';

-- A synthetic session of `replaygate probe` (its clientInfo name and the principal it writes).
CREATE OR REPLACE MACRO is_probe(client_name, principal) AS
    coalesce(client_name = 'replaygate-probe' OR principal = 'replaygate-probe', false);

-- A write: a dispatch of a tool that changes something (`paid` ones too), the writes that
-- must carry an idempotency key and whose duplicates cost money.
CREATE OR REPLACE MACRO is_write(tool_class) AS tool_class IN ('write', 'paid');

-- A stream that ended as it should: closed with its answer complete.
CREATE OR REPLACE MACRO is_completed(state, close_reason) AS
    state = 'CLOSED' AND close_reason = 'completed';

-- The reconnect budget is counted in windows of this many seconds.
CREATE OR REPLACE MACRO reconnect_window_s() AS 10;

-- The reconnect window a time falls in (its number since the epoch).
CREATE OR REPLACE MACRO reconnect_window(ts) AS epoch_ms(ts) // (1000 * reconnect_window_s());

-- The time a reconnect window starts.
CREATE OR REPLACE MACRO reconnect_window_start(w) AS
    make_timestamptz(w * reconnect_window_s() * 1000000);

-- A window over the reconnect budget: more reconnects in it (`n`) than the budget
-- (reconnects per second) allows in a window.
CREATE OR REPLACE MACRO reconnect_over_budget(n, budget_qps) AS
    n > budget_qps * reconnect_window_s();
-- A GET whose cursor its log cannot show: not shown to be a reconnect (`known`:
-- is_reconnect), in a proxy log that cannot show Last-Event-ID (`cursor_shown` false,
-- file_facts). It may have resumed a stream: a reconnect the log does not show.
CREATE OR REPLACE MACRO cursor_unseen(method, known, cursor_shown) AS
    method = 'GET' AND NOT coalesce(known, false) AND NOT cursor_shown;
-- A window the logs cannot decide: within the budget by the `n` reconnects they show, over
-- it if enough of its `unseen` GETs (cursor_unseen) carried a cursor. Neither a finding
-- nor a pass: reconnect_storm returns it `cannot_tell` and the reconnect_qps gate cannot
-- pass a stage with one.
CREATE OR REPLACE MACRO reconnect_undecided(n, unseen, budget_qps) AS
    NOT reconnect_over_budget(n, budget_qps) AND reconnect_over_budget(n + unseen, budget_qps);

-- An event whose loss counts: every kind but the priming event and heartbeats, which carry
-- nothing for the client (a kind not known counts).
CREATE OR REPLACE MACRO loss_counted(kind) AS coalesce(kind, '?') NOT IN ('priming', 'heartbeat');

-- An event lost to its client past a break: one whose loss counts and that, judged by the
-- client's receipts (client_basis), it never accepted, else the server never replayed.
CREATE OR REPLACE MACRO lost_to_client(kind, client_basis, accepted, replayed) AS
    loss_counted(kind) AND CASE WHEN client_basis THEN NOT accepted ELSE NOT replayed END;

-- An event whose loss changes the answer the client ends with: a cumulative one, a message,
-- the result or an error, or one of a kind not known.
CREATE OR REPLACE MACRO changes_answer(cumulative, kind) AS
    cumulative OR kind IN ('message', 'result', 'error') OR kind IS NULL;

-- A client receipt that recorded where its event came from (origin stream, seq and kind);
-- the others are placed through the event log (a_inbox).
CREATE OR REPLACE MACRO receipt_placed(origin_stream_id, seq, kind) AS
    origin_stream_id IS NOT NULL AND seq IS NOT NULL AND kind IS NOT NULL;


-- name: reinit_after_404
-- title: Re-initialize after 404
-- page: sessions
-- kind: share
-- detectors: reinit_missing
-- min_sample: 0
-- causes: true
-- sample: 404s on a session
-- unit: 404s not followed by a re-initialize
-- unit_one: 404 not followed by a re-initialize
-- params: by_stage, flt, detectors, probe_detectors, dead_statuses
-- measure: share of dead-session answers (`dead_session_statuses`, default 404) on a session (not DELETE) followed by a re-initialize; sample: those answers its detector could judge (not those of a log that cannot show the session or an initialize, nor, per stage, those whose client cannot be told apart)
WITH by_cause AS (
    SELECT k, cause,
           -- only the dead-session answers its detector could judge (not those of a log
           -- that cannot show an initialize: they are `cannot_tell`)
           count(*) FILTER (WHERE fact = 'proxy_records'
                              AND dead_session(status, session_hmac, method, $dead_statuses)
                              AND judged_file(file_id, $detectors))
               AS n,
           count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS failures
    FROM gate_rows($by_stage, $flt) GROUP BY k, cause
),
-- the failures by cause (not re-initialized, used after the 404), for the reason
m AS (
    SELECT k, sum(n)::BIGINT AS n, sum(failures)::BIGINT AS failures,
           list({'cause': cause, 'n': failures} ORDER BY failures DESC, cause)
               FILTER (WHERE failures > 0) AS causes
    FROM by_cause GROUP BY k
),
-- The answers in the files it read that its detector found it could not judge (its
-- `-- undecided:` labels: a client that cannot be told apart; a re-initialize, a
-- re-initializing client or a later use that a log that cannot show it may hold, which
-- names that log, a file the detector did not read): `cannot_tell` too, so not in the
-- sample (undecided_units in gate_facts.sql: under a filter, those the filter keeps).
-- The units of a file it was kept from are out of the sample already.
judged AS (
    SELECT m.k, greatest(m.n - coalesce(u.n, 0), 0) AS n, m.failures, m.causes
    FROM m LEFT JOIN undecided_units($by_stage, $flt, $detectors, $probe_detectors) u
      ON u.k IS NOT DISTINCT FROM m.k
)
SELECT k AS stage, CASE WHEN n = 0 THEN NULL ELSE (n - failures) / n END AS value,
       n AS sample, failures, causes
FROM judged

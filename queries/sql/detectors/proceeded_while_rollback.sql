-- name: proceeded_while_rollback
-- invariant: a stage is moved on (rollout action proceed or complete) only while the decision replaygate had recorded for it at that moment is not ROLLBACK
-- failure: A pipeline or an operator moves a rollout on (proceed, complete) while the
--   recorded decision for the stage says ROLLBACK: the gate was ignored, overridden or
--   raced by automation.
-- dashboard: Rollout: a `critical` row per rollout action (`high` when an override was
--   recorded first), naming who acted and why; the decision history shows the ROLLBACK
--   in force at that moment.
-- fix: Make the pipeline wait on `replaygate gates` (exit 3 blocks the step), and record an
--   override with its reason before proceeding against a ROLLBACK.
-- severity: critical, high
-- needs: rollout, decision_history
-- unit: rollout action
-- facts: none
-- purpose: matches each rollout action against the decision in force when it was taken (the newest evaluation recorded at or before it, never a recomputation); critical, or high when an operator had recorded an override of that decision before acting. The detail says who acted and why (rollout actor and note; the override's author and reason)
-- A stage is (name, release): the history keeps its key (`name@release`, the name alone
-- without a release, as a_stages does) and its release, and both must match the action's.
WITH moves AS (
    SELECT file_id, pos, ts, release, action, actor, note,
           CASE WHEN release IS NULL THEN stage ELSE stage || '@' || release END AS stage
    FROM rollout
    WHERE action IN ('proceed', 'complete')
),
evaluations AS (
    SELECT seq, recorded_at, stage, release, decision, reasons, data_version, config_sha256
    FROM decision_history
    WHERE kind = 'evaluation'
),
in_force AS (
    SELECT m.*, e.seq, e.recorded_at, e.decision, e.reasons, e.data_version, e.config_sha256
    FROM moves m
    ASOF JOIN evaluations e
      ON e.stage = m.stage AND e.release IS NOT DISTINCT FROM m.release
     AND m.ts >= e.recorded_at
    WHERE e.decision = 'ROLLBACK'
),
answered AS (
    -- What operators recorded about that decision before the move.
    SELECT f.file_id, f.pos,
           arg_max({'by': o.actor, 'reason': o.note, 'decision': o.decision,
                    'at': strftime(o.recorded_at, '%Y-%m-%dT%H:%M:%S.%fZ')}, o.seq)
               FILTER (WHERE o.kind = 'override') AS override,
           arg_max(o.actor, o.seq) FILTER (WHERE o.kind = 'ack') AS acknowledged_by
    FROM in_force f
    JOIN decision_history o
      ON o.kind IN ('ack', 'override') AND o.stage = f.stage
     AND o.release IS NOT DISTINCT FROM f.release
     AND o.recorded_at >= f.recorded_at AND o.recorded_at <= f.ts
    GROUP BY f.file_id, f.pos
)
SELECT f.ts,
       CASE WHEN a.override.decision = 'PROCEED' THEN 'high' ELSE 'critical' END AS severity,
       f.stage,
       json_object(
           'stage', f.stage,
           'release', f.release,
           'filed_under', f.stage,
           'action', f.action,
           'actor', f.actor,
           'note', f.note,
           'decision_in_force', f.decision,
           'decided_at', strftime(f.recorded_at, '%Y-%m-%dT%H:%M:%S.%fZ'),
           'decision_seq', f.seq,
           'reasons', f.reasons,
           'data_version', f.data_version,
           'config_sha256', f.config_sha256,
           'override', a.override,
           'acknowledged_by', a.acknowledged_by
       ) AS detail
FROM in_force f
LEFT JOIN answered a USING (file_id, pos)

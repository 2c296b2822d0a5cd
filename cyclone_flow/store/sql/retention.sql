-- name: run_purge_terminal
-- Retention: delete up to %(batch)s terminal top runs (completed, failed, cancelled) whose
-- finished_at is older than now() - age; their steps, deps, signals and child runs go with
-- them through ON DELETE CASCADE (a child run is purged with its top run, never while that
-- run may still retry its node). SKIP LOCKED lets many clients purge at once, and a run an
-- operator is retrying (run row locked) is left for a later pass (Client Options:
-- WithRetentionSweep).
DELETE FROM {schema}.cyclone_runs r
WHERE r.id IN (
        SELECT id FROM {schema}.cyclone_runs
        WHERE state <> 'running' AND parent_run_id IS NULL
          AND finished_at < now() - (%(age_us)s::bigint * interval '1 microsecond')
        ORDER BY finished_at
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED)
  AND r.state <> 'running'
RETURNING r.id

-- name: run_count_purgeable
-- Retention dry run: how many terminal top runs finished before now() - age, and their
-- steps (with the steps of their child runs, which carry the top run as root_run_id).
SELECT count(*), coalesce(sum((SELECT count(*) FROM {schema}.cyclone_steps s
                               WHERE s.run_id = r.id OR s.root_run_id = r.id)), 0)
FROM {schema}.cyclone_runs r
WHERE r.state <> 'running' AND r.parent_run_id IS NULL
  AND r.finished_at < now() - (%(age_us)s::bigint * interval '1 microsecond')

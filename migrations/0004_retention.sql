-- 0004_retention: serves the retention sweep, which deletes terminal runs by finished_at
-- (Client Options: WithRetentionSweep). Safe to apply twice.

CREATE INDEX IF NOT EXISTS cyclone_runs_finished_idx
    ON cyclone_runs (finished_at)
    WHERE state <> 'running';

-- 0008_dashboard_indexes: two reads of the dashboard (issue 16) that no index served at
-- 1,000,000 runs. The runs list's unique-key search (run_list_page) reads the runs of one
-- key: a partial index holds only the runs that have a key. A stored flow's last use
-- (workflow_get, workflow_list) is the newest run of its definition: an index by
-- (workflow_id, created_at) answers it with one index entry instead of a walk over every
-- run. Both cost the runs insert path only (one entry per run; none for a run without a
-- unique key), not the steps'. Applied with search_path set to the target schema; safe to
-- apply twice.

CREATE INDEX IF NOT EXISTS cyclone_runs_unique_key_idx
    ON cyclone_runs (unique_key) WHERE unique_key IS NOT NULL;

CREATE INDEX IF NOT EXISTS cyclone_runs_workflow_idx
    ON cyclone_runs (workflow_id, created_at DESC);

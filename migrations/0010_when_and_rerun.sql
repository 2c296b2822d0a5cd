-- 0010_when_and_rerun: conditional nodes and reruns (issue 19).
--
-- Conditional nodes (`when:`): a step's condition (the expression text as written; NULL
-- for a node without one, every step of a flow that uses none) and its on_dep_skip
-- (NULL: 'skip'). A node whose condition is false, or whose dependency was skipped
-- without on_dep_skip: run, goes to the new terminal state `skipped` in the transaction
-- that would have made it available or started it; skip_reason records why:
-- {"when": TEXT, "values": {REFERENCE: VALUE, ...}} (the condition as evaluated) or
-- {"upstream": NODE} (skip-cascade).
--
-- Reruns (`cyclone-flow rerun RUN --from NODE`): cyclone_runs.rerun_of is the run a
-- rerun was made from; a step a rerun took over from that run without running it is
-- `completed` with reused_from = the id of the source step.
--
-- Applied with search_path set to the target schema; safe to apply twice.

ALTER TABLE cyclone_steps
    ADD COLUMN IF NOT EXISTS condition   text,
    ADD COLUMN IF NOT EXISTS on_dep_skip text,
    ADD COLUMN IF NOT EXISTS skip_reason jsonb,
    ADD COLUMN IF NOT EXISTS reused_from bigint;

ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS rerun_of uuid;

-- the reruns of a run (status, the dashboard): none until someone reruns
CREATE INDEX IF NOT EXISTS cyclone_runs_rerun_of_idx
    ON cyclone_runs (rerun_of) WHERE rerun_of IS NOT NULL;

ALTER TABLE cyclone_steps DROP CONSTRAINT IF EXISTS cyclone_steps_state_check;
ALTER TABLE cyclone_steps ADD CONSTRAINT cyclone_steps_state_check CHECK (state IN
    ('pending', 'available', 'running', 'waiting', 'completed', 'discarded', 'cancelled',
     'skipped'));

ALTER TABLE cyclone_steps DROP CONSTRAINT IF EXISTS cyclone_steps_finished_check;
ALTER TABLE cyclone_steps ADD CONSTRAINT cyclone_steps_finished_check CHECK
    ((state IN ('completed', 'discarded', 'cancelled', 'skipped')) = (finished_at IS NOT NULL));

ALTER TABLE cyclone_steps DROP CONSTRAINT IF EXISTS cyclone_steps_on_dep_skip_check;
ALTER TABLE cyclone_steps ADD CONSTRAINT cyclone_steps_on_dep_skip_check
    CHECK (on_dep_skip IN ('skip', 'run'));

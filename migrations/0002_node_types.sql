-- 0002_node_types: fan-out, child and wait-signal nodes, signals, run deadlines
-- (Engine Design: Why Static DAGs; Client Options: WithMaxSignalWait, Limits and Retention).
-- Applied with search_path set to the target schema; every statement is safe to apply twice.

-- The compiled rows of a definition: {"deadline_s": number|null, "nodes": [{node, type,
-- call, needs, queue, priority, max_attempts, backoff, on_dep_failure, timeout_s, input,
-- over, max_parallel, signal, max_wait_s, child_workflow_id}, ...]}. Submit writes it; the
-- steps of a run (and of every child run started later) are inserted from it in SQL.
ALTER TABLE cyclone_workflows ADD COLUMN IF NOT EXISTS plan jsonb;

-- Child runs: the run and node that started them, and the top run of the tree (NULL for a
-- top run). Every transition locks the top run first, then the run: one lock order.
ALTER TABLE cyclone_runs
    ADD COLUMN IF NOT EXISTS parent_run_id   uuid REFERENCES cyclone_runs (id) ON DELETE CASCADE,
    ADD COLUMN IF NOT EXISTS parent_node     text,
    ADD COLUMN IF NOT EXISTS root_run_id     uuid,
    -- the limits of the client that submitted the top run (child runs inherit them)
    ADD COLUMN IF NOT EXISTS output_limit    integer,
    ADD COLUMN IF NOT EXISTS max_signal_wait interval,
    -- flow-level deadline: the run fails with error_kind deadline at deadline_at
    ADD COLUMN IF NOT EXISTS deadline        interval,
    ADD COLUMN IF NOT EXISTS deadline_at     timestamptz;

DO $$
BEGIN
    ALTER TABLE cyclone_runs ADD CONSTRAINT cyclone_runs_parent_check
        CHECK ((parent_run_id IS NULL) = (parent_node IS NULL)
               AND (parent_run_id IS NULL) = (root_run_id IS NULL));
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

CREATE INDEX IF NOT EXISTS cyclone_runs_parent_idx
    ON cyclone_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- serves the deadline scanner
CREATE INDEX IF NOT EXISTS cyclone_runs_deadline_idx
    ON cyclone_runs (deadline_at) WHERE state = 'running' AND deadline_at IS NOT NULL;

ALTER TABLE cyclone_steps
    -- a fan-out item: its fan-out node, its 0-based index in the list, the list element
    ADD COLUMN IF NOT EXISTS parent_node       text,
    ADD COLUMN IF NOT EXISTS item_index        integer,
    ADD COLUMN IF NOT EXISTS item              jsonb,
    -- a fan-out node: its `over` template, max_parallel, and item progress
    ADD COLUMN IF NOT EXISTS over              jsonb,
    ADD COLUMN IF NOT EXISTS max_parallel      integer,
    ADD COLUMN IF NOT EXISTS items_total       integer,
    ADD COLUMN IF NOT EXISTS items_done        integer,
    -- a wait_signal node: the awaited signal; child and wait_signal: max_wait and the
    -- moment the wait expires (set when the node starts waiting)
    ADD COLUMN IF NOT EXISTS signal            text,
    ADD COLUMN IF NOT EXISTS max_wait          interval,
    ADD COLUMN IF NOT EXISTS wait_until        timestamptz,
    -- a child node: the stored child definition and the child run once started
    ADD COLUMN IF NOT EXISTS child_workflow_id bigint REFERENCES cyclone_workflows (id),
    ADD COLUMN IF NOT EXISTS child_run_id      uuid,
    -- the top run of the tree for steps of child runs (NULL: the step's own run)
    ADD COLUMN IF NOT EXISTS root_run_id       uuid;

DO $$
BEGIN
    ALTER TABLE cyclone_steps ADD CONSTRAINT cyclone_steps_item_check
        CHECK ((parent_node IS NULL) = (item_index IS NULL));
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

DO $$
BEGIN
    ALTER TABLE cyclone_steps ADD CONSTRAINT cyclone_steps_max_parallel_check
        CHECK (max_parallel IS NULL OR max_parallel >= 1);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- the next pending items of a fan-out node, in item order (max_parallel release)
CREATE INDEX IF NOT EXISTS cyclone_steps_items_pending_idx
    ON cyclone_steps (run_id, parent_node, item_index)
    WHERE state = 'pending' AND parent_node IS NOT NULL;

-- the items of a fan-out node that hold a max_parallel slot
CREATE INDEX IF NOT EXISTS cyclone_steps_items_active_idx
    ON cyclone_steps (run_id, parent_node)
    WHERE state IN ('available', 'running') AND parent_node IS NOT NULL;

-- serves the wait scanner: child and signal waits with an expiry
CREATE INDEX IF NOT EXISTS cyclone_steps_wait_idx
    ON cyclone_steps (wait_until)
    WHERE state = 'waiting' AND wait_until IS NOT NULL;

-- Signals sent to a run (Client.signal); kept until a wait_signal node consumes them.
-- Purged with their run.
CREATE TABLE IF NOT EXISTS cyclone_signals (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id       uuid        NOT NULL REFERENCES cyclone_runs (id) ON DELETE CASCADE,
    name         text        NOT NULL,
    payload      jsonb       NOT NULL DEFAULT 'null',
    created_at   timestamptz NOT NULL DEFAULT now(),
    consumed_at  timestamptz,
    consumed_by  text,
    CONSTRAINT cyclone_signals_consumed_check
        CHECK ((consumed_at IS NULL) = (consumed_by IS NULL))
);

CREATE INDEX IF NOT EXISTS cyclone_signals_pending_idx
    ON cyclone_signals (run_id, name, id) WHERE consumed_at IS NULL;

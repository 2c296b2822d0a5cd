-- 0001_initial: the core tables of the engine (Engine Design: Why Static DAGs, The Claiming
-- Algorithm, Leases and Heartbeats, Schema Isolation and Migrations).
-- Applied with search_path set to the target schema; every statement is safe to apply twice.

CREATE TABLE IF NOT EXISTS cyclone_workflows (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL,
    digest      text        NOT NULL,
    definition  jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cyclone_workflows_name_digest_key UNIQUE (name, digest)
);

CREATE TABLE IF NOT EXISTS cyclone_runs (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workflow_id   bigint      NOT NULL REFERENCES cyclone_workflows (id),
    flow_name     text        NOT NULL,
    state         text        NOT NULL DEFAULT 'running',
    input         jsonb       NOT NULL DEFAULT 'null',
    output        jsonb,
    error         text,
    error_kind    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    CONSTRAINT cyclone_runs_state_check
        CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    -- terminal <=> finished_at set
    CONSTRAINT cyclone_runs_finished_check
        CHECK ((state = 'running') = (finished_at IS NULL))
) WITH (fillfactor = 90);

CREATE INDEX IF NOT EXISTS cyclone_runs_created_idx ON cyclone_runs (created_at DESC);

CREATE TABLE IF NOT EXISTS cyclone_steps (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            uuid        NOT NULL REFERENCES cyclone_runs (id) ON DELETE CASCADE,
    node              text        NOT NULL,
    type              text        NOT NULL DEFAULT 'action',
    call              text,
    state             text        NOT NULL,
    queue             text        NOT NULL DEFAULT 'default',
    priority          integer     NOT NULL DEFAULT 0,
    scheduled_at      timestamptz NOT NULL DEFAULT now(),
    -- the number of the current (or next) attempt; a reclaim does not change it
    attempt           integer     NOT NULL DEFAULT 1,
    max_attempts      integer     NOT NULL DEFAULT 1,
    -- {"initial_s", "max_s", "multiplier", "jitter"}: backoff between attempts
    backoff           jsonb       NOT NULL DEFAULT '{}',
    on_dep_failure    text        NOT NULL DEFAULT 'fail_run',
    lease_owner       text,
    lease_expiry      timestamptz,
    lease_generation  bigint      NOT NULL DEFAULT 0,
    heartbeat_at      timestamptz,
    started_at        timestamptz,
    timeout           interval,
    reclaims          integer     NOT NULL DEFAULT 0,
    input             jsonb,
    output            jsonb,
    error             text,
    error_kind        text,
    -- one entry per failed attempt: {"attempt", "error", "error_kind", "traceback", "at"}
    errors            jsonb       NOT NULL DEFAULT '[]',
    created_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CONSTRAINT cyclone_steps_state_check CHECK (state IN
        ('pending', 'available', 'running', 'waiting', 'completed', 'discarded', 'cancelled')),
    CONSTRAINT cyclone_steps_finished_check CHECK
        ((state IN ('completed', 'discarded', 'cancelled')) = (finished_at IS NOT NULL)),
    -- a running step always holds a lease
    CONSTRAINT cyclone_steps_lease_check CHECK
        (state <> 'running' OR (lease_owner IS NOT NULL AND lease_expiry IS NOT NULL)),
    CONSTRAINT cyclone_steps_attempt_check CHECK (attempt >= 1 AND max_attempts >= 1),
    CONSTRAINT cyclone_steps_on_dep_failure_check
        CHECK (on_dep_failure IN ('fail_run', 'cancel_branch')),
    CONSTRAINT cyclone_steps_run_node_key UNIQUE (run_id, node)
) WITH (fillfactor = 90);

-- serves the claim query: only available rows, in claim order
CREATE INDEX IF NOT EXISTS cyclone_steps_claim_idx
    ON cyclone_steps (queue, priority, scheduled_at, id)
    WHERE state = 'available';

-- serves the recovery sweep and the heartbeat
CREATE INDEX IF NOT EXISTS cyclone_steps_running_idx
    ON cyclone_steps (lease_expiry)
    WHERE state = 'running';

CREATE TABLE IF NOT EXISTS cyclone_deps (
    run_id      uuid NOT NULL REFERENCES cyclone_runs (id) ON DELETE CASCADE,
    node        text NOT NULL,
    depends_on  text NOT NULL,
    PRIMARY KEY (run_id, node, depends_on),
    CONSTRAINT cyclone_deps_no_self CHECK (node <> depends_on)
);

-- "which nodes depend on X" (release of dependents, branch cancellation)
CREATE INDEX IF NOT EXISTS cyclone_deps_depends_on_idx ON cyclone_deps (run_id, depends_on);

-- The benchmark suite's own SQL: reads of the engine's tables to measure a benchmark, the
-- business table of the exactly-once benchmark, and the raw-SQL ceiling's batched
-- completion. Same format as cyclone_flow/db/sql/*.sql (loaded by benchmarks/sql.py).

-- name: bench_settings
-- The server settings that decide what a commit costs (durability must be on).
SELECT name, setting FROM pg_settings
WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method',
               'shared_buffers', 'max_connections', 'server_version')
ORDER BY name

-- name: bench_runs_left
-- How many runs of the benchmark's schema are still running, and how many failed.
SELECT count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state IN ('failed', 'cancelled'))
FROM {schema}.cyclone_runs

-- name: bench_steps_left
-- How many steps are not yet completed (the ceiling leaves its runs running).
SELECT count(*) FROM {schema}.cyclone_steps WHERE state <> 'completed'

-- name: bench_step_span
-- Completed steps and the database's span from the first claim to the last completion.
SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))::float8
FROM {schema}.cyclone_steps WHERE state = 'completed'

-- name: bench_run_span
-- Completed runs and the span from the first claim of any step to the last run finish.
SELECT (SELECT count(*) FROM {schema}.cyclone_runs WHERE state = 'completed'),
       extract(epoch FROM (SELECT max(finished_at) FROM {schema}.cyclone_runs)
                          - (SELECT min(started_at) FROM {schema}.cyclone_steps))::float8

-- name: bench_db_counters
-- Commits and rollbacks of this database so far (pg_stat_database).
SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()

-- name: bench_table_counters
-- Row changes on the engine's tables of one schema (pg_stat_user_tables).
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
FROM pg_stat_user_tables WHERE schemaname = %(schema)s ORDER BY relname

-- name: bench_stats_snapshot_clear
-- Read fresh statistics in this transaction.
SELECT pg_stat_clear_snapshot()

-- name: bench_wait_sample
-- One sample of what every other client backend of this database is doing: its state
-- (active, idle, idle in transaction) and what it waits on (NULL while on the CPU).
SELECT state, wait_event_type, wait_event
FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend'
  AND pid <> pg_backend_pid()

-- name: bench_backend_pid
-- This connection's server process (its parent is the postmaster).
SELECT pg_backend_pid()

-- name: bench_ledger_create
-- The exactly-once benchmark's business table: one row per step.
CREATE TABLE IF NOT EXISTS {schema}.bench_ledger (
    run_id  uuid NOT NULL,
    node    text NOT NULL,
    amount  integer NOT NULL,
    PRIMARY KEY (run_id, node)
)

-- name: bench_ledger_insert
-- One business row, written in the step's completion transaction.
INSERT INTO {schema}.bench_ledger (run_id, node, amount)
VALUES (%(run_id)s, %(node)s, %(amount)s)
ON CONFLICT (run_id, node) DO NOTHING

-- name: bench_ledger_count
-- Rows written by the exactly-once benchmark.
SELECT count(*) FROM {schema}.bench_ledger

-- name: ceiling_complete_many
-- The batched ceiling: running -> completed for many claimed steps in one statement, each
-- guarded like step_complete_if_leased by owner and its own lease_generation.
UPDATE {schema}.cyclone_steps s
SET state = 'completed', output = 'null', finished_at = statement_timestamp(),
    lease_expiry = NULL
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[]) AS c(id, generation)
WHERE s.id = c.id AND s.state = 'running'
  AND s.lease_owner = %(owner)s AND s.lease_generation = c.generation
RETURNING s.run_id

-- name: bench_clone_runs
-- The ceiling's backlog: %(count)s copies of the template run (its row, its steps as the
-- engine inserted them, its deps) in one statement.
WITH runs AS (
    INSERT INTO {schema}.cyclone_runs (workflow_id, flow_name, input)
    SELECT t.workflow_id, t.flow_name, t.input
    FROM {schema}.cyclone_runs t, generate_series(1, %(count)s)
    WHERE t.id = %(run_id)s
    RETURNING id
), steps AS (
    INSERT INTO {schema}.cyclone_steps
        (run_id, node, type, call, state, queue, priority, max_attempts, backoff,
         on_dep_failure, timeout, input)
    SELECT runs.id, s.node, s.type, s.call, s.state, s.queue, s.priority, s.max_attempts,
           s.backoff, s.on_dep_failure, s.timeout, s.input
    FROM runs, {schema}.cyclone_steps s
    WHERE s.run_id = %(run_id)s
    RETURNING 1
)
SELECT count(*) FROM steps

-- name: ceiling_claim_indexed
-- step_claim_if_available with one queue compared by equality instead of = ANY(array): the
-- same rows and order, but Postgres 16 can then walk cyclone_steps_claim_idx in order
-- instead of sorting every available row (the ceiling's "idx" modes; see FINDINGS.md).
WITH claimable AS (
    SELECT id
    FROM {schema}.cyclone_steps
    WHERE state = 'available' AND coalesce(claim_owner, '') = '' AND queue = %(queue)s
      AND scheduled_at <= now()
      AND (%(run_id)s::uuid IS NULL OR run_id = %(run_id)s::uuid)
    ORDER BY priority, scheduled_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.cyclone_steps s
SET state = 'running',
    lease_owner = %(owner)s,
    lease_expiry = now() + (%(ttl_us)s::bigint * interval '1 microsecond'),
    heartbeat_at = now(),
    started_at = now(),
    lease_generation = s.lease_generation + 1
FROM claimable c
WHERE s.id = c.id AND s.state = 'available'
RETURNING s.id, s.run_id, s.node, s.type, s.call, s.queue, s.attempt, s.max_attempts,
          s.reclaims, s.lease_generation, s.input,
          extract(epoch FROM s.timeout)::float8 AS timeout_s

-- name: bench_bulk_definition
-- The stored definition of run %(run_id)s: the bulk ceiling stores the same one.
SELECT w.name, w.digest, w.definition, w.plan
FROM {schema}.cyclone_workflows w
JOIN {schema}.cyclone_runs r ON r.workflow_id = w.id
WHERE r.id = %(run_id)s

-- name: bench_bulk_run_row
-- The columns the engine's bulk insert wrote on run %(run_id)s (besides id and input).
SELECT workflow_id, flow_name, deadline, output_limit, max_signal_wait
FROM {schema}.cyclone_runs WHERE id = %(run_id)s

-- name: bench_bulk_step_rows
-- The columns the engine's bulk insert wrote on the steps of run %(run_id)s.
SELECT node, type, call, state, queue, priority, max_attempts, backoff, on_dep_failure,
       timeout, input
FROM {schema}.cyclone_steps WHERE run_id = %(run_id)s ORDER BY id

-- name: bench_bulk_dep_rows
-- The deps of run %(run_id)s.
SELECT node, depends_on FROM {schema}.cyclone_deps WHERE run_id = %(run_id)s
ORDER BY node, depends_on

-- name: bench_bulk_store_definition
-- Store a copy of a definition in the ceiling's schema; its id.
INSERT INTO {schema}.cyclone_workflows (name, digest, definition, plan)
VALUES (%(name)s, %(digest)s, %(definition)s, %(plan)s)
RETURNING id

-- name: bench_bulk_runs_unnest
-- The ceiling's multi-row insert of a chunk of runs (ids and inputs as arrays).
INSERT INTO {schema}.cyclone_runs
    (id, workflow_id, flow_name, input, output_limit, max_signal_wait, deadline, deadline_at)
SELECT i.id, %(wid)s, %(name)s, i.input, %(output_limit)s, %(max_wait)s::interval,
       %(deadline)s::interval, statement_timestamp() + %(deadline)s::interval
FROM unnest(%(ids)s::uuid[], %(inputs)s::jsonb[]) AS i(id, input)

-- name: bench_bulk_steps_unnest
-- The ceiling's multi-row insert of the steps of a chunk of runs: every run gets the
-- template's steps (given column by column as arrays).
INSERT INTO {schema}.cyclone_steps
    (run_id, node, type, call, state, queue, priority, max_attempts, backoff,
     on_dep_failure, timeout, input)
SELECT r.id, s.node, s.type, s.call, s.state, s.queue, s.priority, s.max_attempts,
       s.backoff, s.on_dep_failure, s.timeout, s.input
FROM unnest(%(ids)s::uuid[]) WITH ORDINALITY AS r(id, ord)
CROSS JOIN unnest(%(s_node)s::text[], %(s_type)s::text[], %(s_call)s::text[],
                  %(s_state)s::text[], %(s_queue)s::text[], %(s_priority)s::int[],
                  %(s_max_attempts)s::int[], %(s_backoff)s::jsonb[],
                  %(s_on_dep_failure)s::text[], %(s_timeout)s::interval[],
                  %(s_input)s::jsonb[]) WITH ORDINALITY
    AS s(node, type, call, state, queue, priority, max_attempts, backoff, on_dep_failure,
         timeout, input, ord)
ORDER BY r.ord, s.ord

-- name: bench_bulk_deps_unnest
-- The ceiling's multi-row insert of the deps of a chunk of runs (the template's edges).
INSERT INTO {schema}.cyclone_deps (run_id, node, depends_on)
SELECT r.id, e.node, e.depends_on
FROM unnest(%(ids)s::uuid[]) AS r(id)
CROSS JOIN unnest(%(nodes)s::text[], %(needs)s::text[]) AS e(node, depends_on)

-- name: bench_bulk_runs_copy
-- The ceiling's COPY of a chunk of runs.
COPY {schema}.cyclone_runs
    (id, workflow_id, flow_name, input, deadline, output_limit, max_signal_wait)
FROM STDIN

-- name: bench_bulk_steps_copy
-- The ceiling's COPY of the steps of a chunk of runs.
COPY {schema}.cyclone_steps
    (run_id, node, type, call, state, queue, priority, max_attempts, backoff,
     on_dep_failure, timeout, input)
FROM STDIN

-- name: bench_bulk_deps_copy
-- The ceiling's COPY of the deps of a chunk of runs.
COPY {schema}.cyclone_deps (run_id, node, depends_on) FROM STDIN

-- name: bench_health_hold_snapshot
-- The health soak's analytics session: a read of the steps table that, inside a
-- REPEATABLE READ transaction, keeps its snapshot (and so the xmin horizon) until the end.
SELECT count(*) FROM {schema}.cyclone_steps

-- name: bench_health_advised_steps
-- The health advisor's recommended autovacuum settings for cyclone_steps
-- (docs/deployment.md): vacuum after 1% of the rows changed, without cost-based delay.
ALTER TABLE {schema}.cyclone_steps SET (autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02)

-- name: bench_health_advised_runs
-- The same settings for cyclone_runs.
ALTER TABLE {schema}.cyclone_runs SET (autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02)

-- name: bench_health_completed
-- Completed steps of the soak's schema so far (the claim throughput's counter).
SELECT count(*) FROM {schema}.cyclone_steps WHERE state = 'completed'

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
    WHERE state = 'available' AND queue = %(queue)s AND scheduled_at <= now()
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

-- No table: the database clock and session settings.

-- name: pg_now
-- The database clock, or the instant a test pins (River: coalesce(@now, now())).
SELECT coalesce(%(now)s::timestamptz, now())

-- name: session_force_generic_plans
-- Sent first in a completion's pipeline: for the rest of that transaction, prepared
-- statements run their generic plan. With array parameters (run_complete_if_done,
-- step_release_dependents_if_ready, the group commit's statements) Postgres otherwise keeps
-- planning each call anew (the generic plan's estimate for an array of unknown length is
-- higher), which costs 0.5-1 ms per call, several times the statement itself. Only the
-- engine's statements follow it: a handler's own writes in ctx.completion_tx() came before.
SET LOCAL plan_cache_mode = force_generic_plan

-- name: session_set_index_order
-- In a transaction (after session_begin): no sequential scan and no sort for the rest of
-- it. The probes for limited steps (step_exists_limited, step_get_next_rate_token) then
-- read cyclone_steps_limited_idx in its order whatever the statistics say, never the
-- completed steps first in the heap; they take no lock (step_begin_limited_claim sets this
-- and more for the claim itself). And no JIT: the disable cost those settings add to a plan
-- is past every jit_*_above_cost (step_begin_limited_claim).
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true),
       set_config('jit', 'off', true)

-- name: session_begin
-- First of a transaction sent whole in one pipeline on an autocommit connection (the
-- limited claim: BEGIN, its statements and COMMIT in one round trip).
BEGIN ISOLATION LEVEL READ COMMITTED

-- name: session_commit
-- Last of a transaction sent whole in one pipeline (after session_begin).
COMMIT

-- name: session_set_read_snapshot
-- First in a read-only transaction whose reads must agree with each other ("why is it
-- waiting", which reads a run, its steps, deps and the workers): one snapshot for all.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: session_bound_waits
-- First in a transaction of a worker's shutdown: no statement after it in the transaction
-- waits for a lock longer than, or runs longer than, the milliseconds given (a session that
-- holds LOCK TABLE on the steps would otherwise hold the shutdown with it: the statement
-- fails with lock_not_available / query_canceled and what it would write is left undone).
SELECT set_config('lock_timeout', %(ms)s, true), set_config('statement_timeout', %(ms)s, true)

-- name: session_set_read_committed
-- Run once per connection, in autocommit, at its first checkout: the session's default
-- isolation becomes READ COMMITTED whatever the database's or the role's default, so that
-- the statements the engine runs in autocommit are READ COMMITTED as its transactions
-- (which begin with BEGIN ISOLATION LEVEL READ COMMITTED).
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED

-- name: session_get_isolation
-- Sent in a completion's pipeline when the handler used ctx.completion_tx(): the
-- isolation of the transaction and the session's default isolation (both READ COMMITTED
-- on an engine connection: pin_read_committed), to refuse a
-- handler's SET TRANSACTION ISOLATION LEVEL, SET SESSION CHARACTERISTICS or SET
-- default_transaction_isolation before the commit (current_setting only: pg_settings
-- would cost most of a millisecond).
SELECT current_setting('transaction_isolation'),
       current_setting('default_transaction_isolation')

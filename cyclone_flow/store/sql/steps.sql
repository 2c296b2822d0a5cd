-- name: step_insert_plan
-- Insert one step per node of a new run from its definition's compiled plan, in file order
-- (submit, or the start of a child run; Engine Design: Why Static DAGs): action roots
-- available, every other node pending; every step pending when %(hold)s (a held run of a
-- sequence). The submission's %(queue)s / %(priority)s replace those of the nodes that do
-- not set their own (Queues and Priority). No step is claimable before %(run_at)s, or
-- now() plus %(delay_us)s microseconds (a delayed run). Returns each step's queue, state,
-- and whether it is claimable now.
INSERT INTO {schema}.cyclone_steps
    (run_id, root_run_id, node, type, call, state, queue, priority, max_attempts, backoff,
     on_dep_failure, timeout, input, over, max_parallel, signal, max_wait, child_workflow_id,
     scheduled_at)
SELECT %(run_id)s, %(root_run_id)s, p.node, p.type, p.call,
       CASE WHEN p.type = 'action' AND jsonb_array_length(p.needs) = 0
                 AND NOT %(hold)s::boolean
            THEN 'available' ELSE 'pending' END,
       CASE WHEN %(queue)s::text IS NULL OR coalesce(p.queue_own, false) THEN p.queue
            ELSE %(queue)s::text END,
       CASE WHEN %(priority)s::int IS NULL OR coalesce(p.priority_own, false) THEN p.priority
            ELSE %(priority)s::int END,
       p.max_attempts, p.backoff, p.on_dep_failure,
       make_interval(secs => p.timeout_s), p.input, p.over, p.max_parallel, p.signal,
       make_interval(secs => p.max_wait_s), p.child_workflow_id,
       coalesce(%(run_at)s::timestamptz,
                now() + (%(delay_us)s::bigint * interval '1 microsecond'), now())
FROM {schema}.cyclone_workflows w
CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') WITH ORDINALITY AS e(value, ord)
CROSS JOIN LATERAL jsonb_to_record(e.value) AS p(
    node text, type text, call text, needs jsonb, queue text, queue_own boolean,
    priority int, priority_own boolean, max_attempts int, backoff jsonb,
    on_dep_failure text, timeout_s float8, input jsonb, over jsonb, max_parallel int,
    signal text, max_wait_s float8, child_workflow_id bigint)
WHERE w.id = %(workflow_id)s
ORDER BY e.ord
RETURNING queue, state, scheduled_at <= statement_timestamp() AS due

-- name: step_claim
-- available -> running for up to %(limit)s steps of one queue: SKIP LOCKED, then the CAS
-- that takes the lease with the database's now() and a TTL in microseconds (Engine Design:
-- The Claiming Algorithm, CAS State Transitions). queue = %(queue)s (one queue per
-- statement) lets Postgres walk cyclone_steps_claim_idx in (priority, scheduled_at, id)
-- order and stop after %(limit)s rows instead of sorting the queue's backlog. run_input is
-- the run's input as JSON text when the node may need it (no input template and not a
-- fan-out item, or a template that mentions run.input), else NULL: a prefetch that spares
-- the worker a separate read (Output Resolution).
WITH claimable AS (
    SELECT id
    FROM {schema}.cyclone_steps
    WHERE state = 'available' AND queue = %(queue)s AND scheduled_at <= now()
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
          extract(epoch FROM s.timeout)::float8 AS timeout_s,
          greatest(extract(epoch FROM now() - s.scheduled_at), 0)::float8 AS wait_s,
          s.parent_node, s.item_index, s.item,
          CASE WHEN (s.input IS NULL AND s.parent_node IS NULL)
                    OR strpos(s.input::text, 'run.input') > 0
               THEN (SELECT r.input::text FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS run_input

-- name: step_claim_run
-- step_claim restricted to one run and its child runs (cyclone-flow run's %(run_id)s): a
-- statement of its own so the generic plan of step_claim never carries the run filter.
WITH claimable AS (
    SELECT id
    FROM {schema}.cyclone_steps
    WHERE state = 'available' AND queue = %(queue)s AND scheduled_at <= now()
      AND coalesce(root_run_id, run_id) = %(run_id)s::uuid
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
          extract(epoch FROM s.timeout)::float8 AS timeout_s,
          greatest(extract(epoch FROM now() - s.scheduled_at), 0)::float8 AS wait_s,
          s.parent_node, s.item_index, s.item,
          CASE WHEN (s.input IS NULL AND s.parent_node IS NULL)
                    OR strpos(s.input::text, 'run.input') > 0
               THEN (SELECT r.input::text FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS run_input

-- name: step_heartbeat_many
-- Renew the leases this client holds, each guarded by its own lease_generation; a step past
-- started_at + timeout is not renewed, which makes the timeout durable (Engine Design:
-- Leases and Heartbeats). Returns the (id, generation) pairs renewed; a missing one lost
-- its lease.
UPDATE {schema}.cyclone_steps s
SET lease_expiry = now() + (%(ttl_us)s::bigint * interval '1 microsecond'),
    heartbeat_at = now()
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[]) AS h(id, generation)
WHERE s.id = h.id
  AND s.state = 'running'
  AND s.lease_owner = %(owner)s
  AND s.lease_generation = h.generation
  AND (s.timeout IS NULL OR s.started_at + s.timeout > now())
RETURNING s.id, s.lease_generation

-- name: tx_generic_plans
-- Sent first in a completion's pipeline: for the rest of that transaction, prepared
-- statements run their generic plan. With array parameters (run_complete_if_done,
-- step_release_dependents, the group commit's statements) Postgres otherwise keeps
-- planning each call anew (the generic plan's estimate for an array of unknown length is
-- higher), which costs 0.5-1 ms per call, several times the statement itself. Only the
-- engine's statements follow it: a handler's own writes in ctx.completion_tx() came before.
SET LOCAL plan_cache_mode = force_generic_plan

-- name: step_complete_if_leased
-- running -> completed with the output, guarded by the claim's owner and lease_generation,
-- and by the step's timeout: a completion after started_at + timeout is late even before
-- the sweep took the step (the timeout is durable); zero rows means stale (CAS State
-- Transitions). statement_timestamp(), not now(): the completion transaction may have been
-- opened early in the handler. Returns the output as the database stores it (jsonb text)
-- for the worker's output cache (Output Resolution).
UPDATE {schema}.cyclone_steps
SET state = 'completed', output = %(output)s, finished_at = statement_timestamp(), lease_expiry = NULL
WHERE id = %(id)s AND state = 'running'
  AND lease_owner = %(owner)s AND lease_generation = %(generation)s
  AND (timeout IS NULL OR started_at + timeout > statement_timestamp())
RETURNING run_id, parent_node, output::text

-- name: step_complete_many_if_leased
-- Group commit of completions (issue 8): running -> completed for a batch of steps whose
-- handlers did not open ctx.completion_tx(), each row guarded exactly as
-- step_complete_if_leased by its own claim (%(owner)s and its lease_generation) and its
-- timeout (CAS State Transitions). A step missing from the result is stale. Runs under the
-- run row locks of run_lock_many. Returns each completed step's id, lease_generation,
-- run_id, parent_node and output as the database stores it (jsonb text).
UPDATE {schema}.cyclone_steps s
SET state = 'completed', output = b.output::jsonb, finished_at = statement_timestamp(),
    lease_expiry = NULL
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[], %(outputs)s::text[])
     AS b(id, generation, output)
WHERE s.id = b.id AND s.state = 'running'
  AND s.lease_owner = %(owner)s AND s.lease_generation = b.generation
  AND (s.timeout IS NULL OR s.started_at + s.timeout > statement_timestamp())
RETURNING s.id, s.lease_generation, s.run_id, s.parent_node, s.output::text

-- name: step_release_ready
-- pending -> available (action nodes) or waiting (fan_out, child and wait_signal nodes,
-- which the engine starts in the same transaction) for every step of run %(run_id)s whose
-- every dependency completed: after a submit, the release of a held run of a sequence, or
-- an operator retry (the dependents of completed nodes: step_release_dependents). A later
-- scheduled_at (a delayed run) is kept. Fan-out items are released by
-- fan_out_release_items instead.
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN s.type = 'action' THEN 'available' ELSE 'waiting' END,
    scheduled_at = greatest(s.scheduled_at, statement_timestamp()),
    started_at = CASE WHEN s.type = 'action' THEN s.started_at ELSE statement_timestamp() END
WHERE s.run_id = %(run_id)s
  AND s.state = 'pending'
  AND s.parent_node IS NULL
  AND NOT EXISTS (
      SELECT 1
      FROM {schema}.cyclone_deps d
      JOIN {schema}.cyclone_steps u ON u.run_id = d.run_id AND u.node = d.depends_on
      WHERE d.run_id = %(run_id)s AND d.node = s.node AND u.state <> 'completed')
RETURNING s.run_id, s.queue, s.node, s.type

-- name: step_release_dependents
-- After completions: the dependents of each completed (%(run_ids)s[i], %(nodes)s[i]) whose
-- every dependency completed, pending -> available (actions) or waiting (the engine starts
-- the others in the same transaction); one node, or every node of a group commit (issue
-- 8). Runs under the run row locks, so two fan-in completions cannot both miss each other.
-- Returns each released step's run, queue, node and type.
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN s.type = 'action' THEN 'available' ELSE 'waiting' END,
    scheduled_at = greatest(s.scheduled_at, statement_timestamp()),
    started_at = CASE WHEN s.type = 'action' THEN s.started_at ELSE statement_timestamp() END
FROM (SELECT DISTINCT d.run_id, d.node
      FROM unnest(%(run_ids)s::uuid[], %(nodes)s::text[]) AS c(run_id, node)
      -- LATERAL: one index lookup per completed node, never a scan of cyclone_deps
      CROSS JOIN LATERAL (SELECT x.run_id, x.node FROM {schema}.cyclone_deps x
                          WHERE x.run_id = c.run_id AND x.depends_on = c.node) d) t
WHERE s.run_id = t.run_id AND s.node = t.node
  AND s.state = 'pending'
  AND s.parent_node IS NULL
  AND NOT EXISTS (
      SELECT 1
      FROM {schema}.cyclone_deps d
      JOIN {schema}.cyclone_steps u ON u.run_id = d.run_id AND u.node = d.depends_on
      WHERE d.run_id = s.run_id AND d.node = s.node AND u.state <> 'completed')
RETURNING s.run_id, s.queue, s.node, s.type

-- name: step_fail_attempt
-- A failed attempt of a running step, guarded by lease_generation (and, when a worker
-- reports it, by the owner and the timeout: past started_at + timeout only a timeout
-- failure counts, which timed_out marks and requires the deadline to have passed): back
-- to available at now() + backoff while attempts remain and the failure is not permanent,
-- else discarded (dead letter). Each attempt's error is appended to errors. The backoff
-- is min(max, initial * multiplier^(attempt - 1) * (1 +/- jitter)), computed as
-- exp(min(ln max, ln initial + (attempt - 1) * ln multiplier)) so that no stored value
-- and no attempt number can overflow or underflow float8: every parameter is clamped in
-- numeric first (initial and max to 0 or [1ms, 366d], multiplier to [1, 1e300], jitter to
-- [0, 1]), the exponent never exceeds ln max (attempt 10,000 waits max) and the jitter
-- never pushes the wait past max; an initial or max of 0 means no wait (Engine Design:
-- Failure Propagation, Leases and Heartbeats). step_fail_attempt_without_backoff records
-- the attempt when even this cannot be computed (a stored backoff that is not numbers).
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN p.retry THEN 'available' ELSE 'discarded' END,
    attempt = CASE WHEN p.retry THEN s.attempt + 1 ELSE s.attempt END,
    scheduled_at = CASE WHEN p.retry THEN statement_timestamp() + p.delay_s * interval '1 second'
                        ELSE s.scheduled_at END,
    finished_at = CASE WHEN p.retry THEN NULL ELSE statement_timestamp() END,
    lease_owner = CASE WHEN p.retry THEN NULL ELSE s.lease_owner END,
    lease_expiry = NULL,
    heartbeat_at = CASE WHEN p.retry THEN NULL ELSE s.heartbeat_at END,
    error = %(error)s,
    error_kind = %(error_kind)s,
    errors = s.errors || jsonb_build_array(jsonb_build_object(
        'attempt', s.attempt, 'error', %(error)s::text, 'error_kind', %(error_kind)s::text,
        'traceback', %(traceback)s::text, 'at', statement_timestamp()))
FROM (
    SELECT b.id, b.retry,
           CASE WHEN b.initial_s <= 0 OR b.max_s <= 0 THEN 0
                ELSE least(b.max_s,
                           exp(least(ln(b.max_s),
                                     ln(b.initial_s)
                                     + greatest(b.attempt - 1, 0) * ln(b.multiplier)))
                           * (1 + b.jitter * (2 * random() - 1)))
           END AS delay_s
    FROM (
        SELECT c.id, c.attempt, c.retry,
               (CASE WHEN c.initial_n <= 0 THEN 0
                     ELSE least(greatest(c.initial_n, 0.001), 31622400) END)::float8 AS initial_s,
               (CASE WHEN c.max_n <= 0 THEN 0
                     ELSE least(greatest(c.max_n, 0.001), 31622400) END)::float8 AS max_s,
               least(greatest(c.multiplier_n, 1), 1e300)::float8 AS multiplier,
               least(greatest(c.jitter_n, 0), 1)::float8 AS jitter
        FROM (
            SELECT id, attempt,
                   attempt < max_attempts AND NOT %(permanent)s::boolean AS retry,
                   coalesce((backoff->>'initial_s')::numeric, 1) AS initial_n,
                   coalesce((backoff->>'max_s')::numeric, 300) AS max_n,
                   coalesce((backoff->>'multiplier')::numeric, 2) AS multiplier_n,
                   coalesce((backoff->>'jitter')::numeric, 0.1) AS jitter_n
            FROM {schema}.cyclone_steps
            WHERE id = %(id)s
        ) c
    ) b
) p
WHERE s.id = p.id
  AND s.state = 'running'
  AND s.lease_generation = %(generation)s
  AND (%(owner)s::text IS NULL
       OR (s.lease_owner = %(owner)s
           AND (s.timeout IS NULL OR s.started_at + s.timeout > statement_timestamp())))
  AND (NOT %(timed_out)s::boolean
       OR (s.timeout IS NOT NULL AND s.started_at + s.timeout <= statement_timestamp()))
RETURNING s.run_id, s.node, s.state, s.queue, s.attempt, s.parent_node

-- name: step_fail_attempt_without_backoff
-- step_fail_attempt without reading the step's backoff (used when computing it raised a
-- data error, in a fresh transaction): the same guards and the same record of the
-- attempt, but a retry is available at once, so a failure is never left unrecorded.
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN p.retry THEN 'available' ELSE 'discarded' END,
    attempt = CASE WHEN p.retry THEN s.attempt + 1 ELSE s.attempt END,
    scheduled_at = CASE WHEN p.retry THEN statement_timestamp() ELSE s.scheduled_at END,
    finished_at = CASE WHEN p.retry THEN NULL ELSE statement_timestamp() END,
    lease_owner = CASE WHEN p.retry THEN NULL ELSE s.lease_owner END,
    lease_expiry = NULL,
    heartbeat_at = CASE WHEN p.retry THEN NULL ELSE s.heartbeat_at END,
    error = %(error)s,
    error_kind = %(error_kind)s,
    errors = s.errors || jsonb_build_array(jsonb_build_object(
        'attempt', s.attempt, 'error', %(error)s::text, 'error_kind', %(error_kind)s::text,
        'traceback', %(traceback)s::text, 'at', statement_timestamp()))
FROM (
    SELECT id, attempt < max_attempts AND NOT %(permanent)s::boolean AS retry
    FROM {schema}.cyclone_steps
    WHERE id = %(id)s
) p
WHERE s.id = p.id
  AND s.state = 'running'
  AND s.lease_generation = %(generation)s
  AND (%(owner)s::text IS NULL
       OR (s.lease_owner = %(owner)s
           AND (s.timeout IS NULL OR s.started_at + s.timeout > statement_timestamp())))
  AND (NOT %(timed_out)s::boolean
       OR (s.timeout IS NOT NULL AND s.started_at + s.timeout <= statement_timestamp()))
RETURNING s.run_id, s.node, s.state, s.queue, s.attempt, s.parent_node

-- name: step_cancel_remaining
-- Every non-terminal step of a failed or cancelled run -> cancelled (a second UPDATE in the
-- discarding transaction; Engine Design: Failure Propagation).
UPDATE {schema}.cyclone_steps
SET state = 'cancelled', finished_at = statement_timestamp(), lease_expiry = NULL,
    error = %(error)s, error_kind = 'cancelled'
WHERE run_id = %(run_id)s AND state NOT IN ('completed', 'discarded', 'cancelled')
RETURNING node

-- name: step_cancel_nodes
-- The named non-terminal steps of a run -> cancelled (a contained branch: cancel_branch).
UPDATE {schema}.cyclone_steps
SET state = 'cancelled', finished_at = statement_timestamp(), lease_expiry = NULL,
    error = %(error)s, error_kind = 'cancelled'
WHERE run_id = %(run_id)s AND node = ANY(%(nodes)s::text[])
  AND state NOT IN ('completed', 'discarded', 'cancelled')
RETURNING node

-- name: step_rescue_expired
-- Recovery sweep: running steps whose lease expired (and whose timeout has not passed) ->
-- available, lease cleared, reclaims + 1, no attempt charged, scheduled_at untouched
-- (Engine Design: Leases and Heartbeats). Steps that reached max_reclaims are left to
-- step_find_reclaim_exhausted.
UPDATE {schema}.cyclone_steps s
SET state = 'available', lease_owner = NULL, lease_expiry = NULL, heartbeat_at = NULL,
    reclaims = s.reclaims + 1
WHERE s.id IN (
        SELECT id FROM {schema}.cyclone_steps
        WHERE state = 'running' AND lease_expiry < now()
          AND (timeout IS NULL OR started_at + timeout > now())
          AND (%(max_reclaims)s::int = 0 OR reclaims < %(max_reclaims)s::int)
        ORDER BY lease_expiry
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED)
  AND s.state = 'running'
  AND s.lease_expiry < now()
RETURNING s.id, s.run_id, s.node, s.queue, s.reclaims

-- name: step_find_timed_out
-- Recovery sweep: running steps past started_at + timeout, even with a fresh lease.
SELECT id, run_id, node, lease_generation
FROM {schema}.cyclone_steps
WHERE state = 'running' AND timeout IS NOT NULL AND started_at + timeout <= now()
ORDER BY started_at
LIMIT %(batch)s

-- name: step_find_reclaim_exhausted
-- Recovery sweep: expired leases of steps already reclaimed max_reclaims times.
SELECT id, run_id, node, lease_generation
FROM {schema}.cyclone_steps
WHERE state = 'running' AND lease_expiry < now()
  AND %(max_reclaims)s::int > 0 AND reclaims >= %(max_reclaims)s::int
ORDER BY lease_expiry
LIMIT %(batch)s

-- name: step_output_get
-- The output of one node of a run as JSON text (output resolution by (run_id, node)).
SELECT output::text, state FROM {schema}.cyclone_steps WHERE run_id = %(run_id)s AND node = %(node)s

-- name: step_list
-- Every step of a run in creation order (fan-out items only when %(items)s).
SELECT id, node, type, call, state, queue, priority, attempt, max_attempts, reclaims,
       lease_owner, lease_expiry, lease_generation, started_at, finished_at, scheduled_at,
       output, error, error_kind, errors, parent_node, item_index, items_total, items_done,
       signal, wait_until, child_run_id
FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND (%(items)s OR parent_node IS NULL)
ORDER BY id

-- name: step_release_leases
-- Graceful shutdown: this client's unfinished steps running -> available at once (lease
-- cleared, no attempt and no reclaim charged), each guarded by its lease_generation.
UPDATE {schema}.cyclone_steps s
SET state = 'available', lease_owner = NULL, lease_expiry = NULL, heartbeat_at = NULL
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[]) AS h(id, generation)
WHERE s.id = h.id AND s.state = 'running' AND s.lease_owner = %(owner)s
  AND s.lease_generation = h.generation
RETURNING s.queue

-- name: step_count_active
-- How many steps of the given queues are available (at any scheduled_at) or running:
-- zero means a worker serving them has nothing left to do (worker --exit-when-idle).
SELECT count(*) FROM {schema}.cyclone_steps
WHERE state IN ('available', 'running') AND queue = ANY(%(queues)s::text[])

-- name: step_reset_for_retry
-- Operator retry: discarded steps (all, or only %(node)s and its fan-out items) and every
-- cancelled step of the run -> pending with attempts and reclaims reset; step_release_ready
-- then releases those whose dependencies completed (a fan-out node releases its reset
-- items again; a child node starts a new child run). The per-attempt error history is kept.
UPDATE {schema}.cyclone_steps
SET state = 'pending', attempt = 1, reclaims = 0, error = NULL, error_kind = NULL,
    finished_at = NULL, lease_owner = NULL, lease_expiry = NULL, heartbeat_at = NULL,
    started_at = NULL, output = NULL, scheduled_at = statement_timestamp(),
    wait_until = NULL, child_run_id = NULL
WHERE run_id = %(run_id)s
  AND (state = 'cancelled'
       OR (state = 'discarded'
           AND (%(node)s::text IS NULL OR node = %(node)s OR parent_node = %(node)s)))
RETURNING node, parent_node

-- name: step_get_state
-- The state of one node of a run, and its fan-out node when it is an item.
SELECT state, parent_node FROM {schema}.cyclone_steps WHERE run_id = %(run_id)s AND node = %(node)s

-- name: step_list_discarded
-- The discarded nodes of a run.
SELECT node FROM {schema}.cyclone_steps WHERE run_id = %(run_id)s AND state = 'discarded'

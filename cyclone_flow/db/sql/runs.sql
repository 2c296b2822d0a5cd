-- Table cyclone_runs: one row per run (a top run, or the child run a child node started)
-- with its state, input, output and error, the limits of the client that submitted it, its
-- queue features and its deadline. Defined by migrations 0001_initial, 0002_node_types
-- (parent and root run, deadline, output_limit, max_signal_wait), 0003_queue_features
-- (unique key and slot, sequence, schedule tick, the cyclone_runs_state_change trigger),
-- 0004_retention (the finished_at index) and 0010_when_and_rerun (rerun_of). Every state change runs under the run row lock
-- (run_lock); lock order: a run's row lock, then its sequence's row lock
-- (sequence_lock), then other runs of the sequence only with SKIP LOCKED.

-- name: run_cancel_if_failed_in_sequence
-- failed -> cancelled for a run of a sequence (operator cancel): the runs behind it go on.
UPDATE {schema}.cyclone_runs
SET state = 'cancelled', finished_at = statement_timestamp(),
    error = %(error)s || ' (the run had failed: ' || coalesce(error, '') || ')',
    error_kind = 'cancelled'
WHERE id = %(run_id)s AND state = 'failed' AND sequence_key IS NOT NULL
RETURNING id

-- name: run_cancel_if_running
-- running -> cancelled (operator cancel); step_cancel_if_unfinished follows in the same
-- transaction. Exactly one of a cancel and a racing completion wins: both take the run lock.
UPDATE {schema}.cyclone_runs
SET state = 'cancelled', finished_at = statement_timestamp(), error = %(error)s, error_kind = 'cancelled'
WHERE id = %(run_id)s AND state = 'running'
RETURNING id, parent_run_id, parent_node

-- name: run_cancel_tree_if_running
-- Cancel the running descendants of %(run_id)s (and %(run_id)s itself when %(with_self)s)
-- with every unfinished step of theirs: a parent that failed, was cancelled, or stopped
-- waiting for its child cancels the child's whole tree (their handlers learn it on their
-- next heartbeat). Returns the runs cancelled.
WITH RECURSIVE tree(id) AS (
    SELECT id FROM {schema}.cyclone_runs WHERE id = %(run_id)s AND %(with_self)s
    UNION ALL
    SELECT id FROM {schema}.cyclone_runs WHERE parent_run_id = %(run_id)s
    UNION ALL
    SELECT r.id FROM {schema}.cyclone_runs r JOIN tree t ON r.parent_run_id = t.id
        WHERE t.id <> %(run_id)s
), runs AS (
    UPDATE {schema}.cyclone_runs r
    SET state = 'cancelled', finished_at = statement_timestamp(), error = %(error)s,
        error_kind = 'cancelled'
    FROM (SELECT DISTINCT id FROM tree) t
    WHERE r.id = t.id AND r.state = 'running'
    RETURNING r.id
), steps AS (
    UPDATE {schema}.cyclone_steps s
    SET state = 'cancelled', finished_at = statement_timestamp(), lease_expiry = NULL,
        error = %(error)s, error_kind = 'cancelled'
    WHERE s.run_id IN (SELECT id FROM runs)
      AND s.state NOT IN ('completed', 'discarded', 'cancelled', 'skipped')
    RETURNING s.run_id
)
SELECT id, (SELECT count(*) FROM steps) FROM runs

-- name: run_complete_if_done
-- running -> completed for each run of %(run_ids)s with no non-terminal step left (one
-- run after a completion, or every run of a group commit); the output maps each completed
-- leaf node (never a fan-out item) to its output. Returns each completed run's id, its
-- parent run and node (a child run) and its sequence key (Sequences: the next run is
-- released without another read).
UPDATE {schema}.cyclone_runs r
SET state = 'completed',
    finished_at = statement_timestamp(),
    output = (
        SELECT coalesce(jsonb_object_agg(s.node, s.output ORDER BY s.id), '{{}}'::jsonb)
        FROM {schema}.cyclone_steps s
        WHERE s.run_id = r.id AND s.state = 'completed' AND s.parent_node IS NULL
          AND NOT EXISTS (SELECT 1 FROM {schema}.cyclone_deps d
                          WHERE d.run_id = r.id AND d.depends_on = s.node))
WHERE r.id = ANY(%(run_ids)s::uuid[])
  AND r.state = 'running'
  AND NOT EXISTS (SELECT 1 FROM {schema}.cyclone_steps s
                  WHERE s.run_id = r.id
                    AND s.state NOT IN ('completed', 'discarded', 'cancelled', 'skipped'))
RETURNING r.id, r.parent_run_id, r.parent_node, r.sequence_key

-- name: run_count_purgeable
-- Retention dry run: how many terminal top runs finished before now() - age, and their
-- steps (with the steps of their child runs, which carry the top run as root_run_id).
-- %(now)s pins the clock (tests; NULL: the database's now()).
SELECT count(*), coalesce(sum((SELECT count(*) FROM {schema}.cyclone_steps s
                               WHERE s.run_id = r.id OR s.root_run_id = r.id)), 0)
FROM {schema}.cyclone_runs r
WHERE r.state <> 'running' AND r.parent_run_id IS NULL
  AND r.finished_at < coalesce(%(now)s::timestamptz, now())
                      - (%(age_us)s::bigint * interval '1 microsecond')

-- name: run_count_states_since
-- Runs created in the last %(age_s)s seconds (database clock) by state, counting at most
-- %(cap)s of them, newest first on cyclone_runs_created_idx: the dashboard's counts stay
-- fast on millions of runs (a count that reached the cap is shown as "cap+").
SELECT t.state, count(*)::int AS n
FROM (SELECT state FROM {schema}.cyclone_runs
      WHERE created_at >= now() - make_interval(secs => %(age_s)s)
      ORDER BY created_at DESC
      LIMIT %(cap)s) t
GROUP BY t.state

-- name: run_disown_if_owner_gone
-- The owner release (isolated runs): clear the owner of the top runs whose owner has no
-- cyclone_workers row heartbeated within its lease_ttl of now (the database clock, or a
-- pinned instant), so steps inserted later (fan-out items, child runs) are claimable by
-- every worker; SKIP LOCKED (a locked run waits for the next pass). Returns their ids.
WITH gone AS (
    SELECT r.id
    FROM {schema}.cyclone_runs r
    WHERE r.owner IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.cyclone_workers w
          WHERE w.client_id = r.owner
            AND w.heartbeat_at >= coalesce(%(now)s::timestamptz, now()) - w.lease_ttl)
    ORDER BY r.id
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE {schema}.cyclone_runs r
SET owner = NULL
FROM gone g
WHERE r.id = g.id
RETURNING r.id

-- name: run_exists_open_in_sequence
-- Whether some run of the sequence is neither completed nor cancelled (a new run is then
-- held); read under the sequence's row lock.
SELECT EXISTS (
    SELECT 1 FROM {schema}.cyclone_runs
    WHERE sequence_key = %(key)s AND state NOT IN ('completed', 'cancelled'))

-- name: run_fail_if_past_deadline
-- Deadline scanner: running -> failed with error_kind deadline, guarded by deadline_at (a
-- run that finished or was retried meanwhile is stale). step_cancel_if_unfinished follows.
-- %(now)s pins the clock (tests; NULL: the database's now()).
UPDATE {schema}.cyclone_runs
SET state = 'failed', finished_at = statement_timestamp(), error_kind = 'deadline',
    error = format('run passed its deadline of %%s (at %%s)', deadline, deadline_at)
WHERE id = %(run_id)s AND state = 'running' AND deadline_at IS NOT NULL
  AND deadline_at <= coalesce(%(now)s::timestamptz, now())
RETURNING id, parent_run_id, parent_node, error

-- name: run_fail_if_running
-- running -> failed, once: a later discard finds the run terminal and changes nothing.
UPDATE {schema}.cyclone_runs
SET state = 'failed', finished_at = statement_timestamp(), error = %(error)s, error_kind = %(error_kind)s
WHERE id = %(run_id)s AND state = 'running'
RETURNING id, parent_run_id, parent_node

-- name: run_get
-- One run with its flow name and timestamps.
SELECT r.id, r.flow_name, r.state, r.input, r.output, r.error, r.error_kind,
       r.created_at, r.finished_at, w.digest, r.parent_run_id, r.parent_node, r.deadline_at,
       r.rerun_of, r.revision
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE r.id = %(run_id)s

-- name: run_get_definition
-- The flow definition (the flow file as JSON) a run was submitted with (graph --run).
SELECT w.definition
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE r.id = %(run_id)s

-- name: run_get_input
-- The input of one run as JSON text (output resolution of run.input references).
SELECT input::text FROM {schema}.cyclone_runs WHERE id = %(run_id)s

-- name: run_get_queue_info
-- The queue-feature columns of one run (status output).
SELECT unique_key, unique_slot IS NOT NULL AS unique_held, unique_states, sequence_key,
       sequence_pos, sequence_held, schedule_id, scheduled_for
FROM {schema}.cyclone_runs WHERE id = %(run_id)s

-- name: run_get_sequence_holder
-- The run a held run of a sequence waits for: the first run of its sequence before it
-- that is neither completed nor cancelled (NULL: none, the release is due).
SELECT h.id FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_runs h ON h.sequence_key = r.sequence_key AND h.sequence_pos < r.sequence_pos
WHERE r.id = %(run_id)s AND h.state NOT IN ('completed', 'cancelled')
ORDER BY h.sequence_pos
LIMIT 1

-- name: run_get_sequence
-- The sequence key of a run (NULL when it is in none).
SELECT sequence_key FROM {schema}.cyclone_runs WHERE id = %(run_id)s

-- name: run_get_unique_holder
-- The run that holds a unique key now (read after a conflicting insert; Unique Jobs).
SELECT id FROM {schema}.cyclone_runs
WHERE unique_slot = CASE WHEN %(unique_window_s)s::float8 IS NULL THEN %(unique_key)s::text
                         ELSE %(unique_key)s::text || '@'
                              || floor(extract(epoch FROM now())
                                       / %(unique_window_s)s::float8)::bigint::text
                    END

-- name: run_insert
-- Insert a new top run of a stored definition with its queue options (seeds: Unique Jobs,
-- Sequences) and the limits of the submitting client (Client Options: Limits and
-- Retention, WithMaxSignalWait): with a unique key the unique_slot (key, plus the window
-- bucket of the database's now()) conflicts with a run still holding it, and the insert
-- does nothing (the caller then reads the winner). The flow's deadline counts from the
-- run's start: run_at, or now() plus a delay in microseconds, or now(). %(owner)s: the
-- client id of the `cyclone-flow run` process of an isolated run (NULL: shared).
-- %(traceparent)s: the submitter's W3C trace context (NULL: none; docs/observability.md).
-- %(revision)s: the deployed revision of the flow submitted by name (NULL: from a file).
INSERT INTO {schema}.cyclone_runs
    (workflow_id, flow_name, input, unique_key, unique_slot, unique_states,
     sequence_key, sequence_pos, sequence_held, schedule_id, scheduled_for,
     output_limit, max_signal_wait, deadline, deadline_at, owner, traceparent, revision)
SELECT w.id, w.name, %(input)s::jsonb, %(unique_key)s::text,
    CASE WHEN %(unique_key)s::text IS NULL THEN NULL
         WHEN %(unique_window_s)s::float8 IS NULL THEN %(unique_key)s::text
         ELSE %(unique_key)s::text || '@'
              || floor(extract(epoch FROM now()) / %(unique_window_s)s::float8)::bigint::text
    END,
    coalesce(%(unique_states)s::text[], ARRAY['running']),
    %(sequence_key)s::text, %(sequence_pos)s::bigint, %(sequence_held)s::boolean,
    %(schedule_id)s::bigint, %(scheduled_for)s::timestamptz,
    %(output_limit)s::integer, make_interval(secs => %(max_signal_wait_s)s::float8),
    make_interval(secs => (w.plan->>'deadline_s')::float8),
    greatest(statement_timestamp(),
             coalesce(%(run_at)s::timestamptz,
                      statement_timestamp()
                          + (%(delay_us)s::bigint * interval '1 microsecond')))
        + make_interval(secs => (w.plan->>'deadline_s')::float8),
    %(owner)s::text, %(traceparent)s::text, %(revision)s::int
FROM {schema}.cyclone_workflows w
WHERE w.id = %(workflow_id)s
ON CONFLICT (unique_slot) WHERE unique_slot IS NOT NULL DO NOTHING
RETURNING id

-- name: run_get_rerun_source
-- What a rerun needs of the run it is made from: its state, definition, input (JSON text)
-- and that definition's input_schema, its parent run (a child run cannot be rerun alone)
-- and the limits of the client that submitted it (the rerun keeps them).
SELECT r.id, r.state, r.workflow_id, r.flow_name, r.input::text AS input,
       w.definition->'input_schema' AS input_schema, r.parent_run_id
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE r.id = %(run_id)s

-- name: run_insert_rerun
-- Insert the rerun of run %(rerun_of)s: a new top run of the same stored definition with
-- %(input)s, rerun_of set, and the original's limits (output_limit, max_signal_wait); its
-- deadline counts from now. No unique key, sequence, schedule or owner. Returns its id.
INSERT INTO {schema}.cyclone_runs
    (workflow_id, flow_name, input, output_limit, max_signal_wait, deadline, deadline_at,
     rerun_of)
SELECT w.id, w.name, %(input)s::jsonb, o.output_limit, o.max_signal_wait,
    make_interval(secs => (w.plan->>'deadline_s')::float8),
    statement_timestamp() + make_interval(secs => (w.plan->>'deadline_s')::float8),
    o.id
FROM {schema}.cyclone_runs o
JOIN {schema}.cyclone_workflows w ON w.id = o.workflow_id
WHERE o.id = %(rerun_of)s
RETURNING id

-- name: run_insert_with_plan
-- Insert a new top run %(id)s (chosen by the caller) of a stored definition with its steps
-- and deps from the definition's plan, in one statement (a single submission with a
-- remembered definition, run in autocommit: one round trip, one commit). Only for a run
-- without unique key, sequence, schedule or owner whose root nodes are all actions: the
-- columns as run_insert, step_insert_plan and dep_insert_plan write them. Returns the id,
-- or no row (and writes nothing) when the definition is not stored.
WITH w AS (
    SELECT id, name, plan FROM {schema}.cyclone_workflows WHERE id = %(workflow_id)s
), run AS (
    INSERT INTO {schema}.cyclone_runs
        (id, workflow_id, flow_name, input, output_limit, max_signal_wait, deadline,
         deadline_at, traceparent)
    SELECT %(id)s::uuid, w.id, w.name, %(input)s::jsonb, %(output_limit)s::integer,
        make_interval(secs => %(max_signal_wait_s)s::float8),
        make_interval(secs => (w.plan->>'deadline_s')::float8),
        greatest(statement_timestamp(),
                 coalesce(%(run_at)s::timestamptz,
                          statement_timestamp()
                              + (%(delay_us)s::bigint * interval '1 microsecond')))
            + make_interval(secs => (w.plan->>'deadline_s')::float8),
        %(traceparent)s::text
    FROM w
    RETURNING id
), step AS (
    INSERT INTO {schema}.cyclone_steps
        (run_id, node, type, call, state, queue, priority, max_attempts, backoff,
         on_dep_failure, timeout, input, over, max_parallel, signal, max_wait,
         child_workflow_id, condition, on_dep_skip, scheduled_at, traceparent)
    SELECT run.id, p.node, p.type, p.call,
           CASE WHEN p.type = 'action' AND jsonb_array_length(p.needs) = 0
                     AND p."when" IS NULL
                THEN 'available' ELSE 'pending' END,
           CASE WHEN %(queue)s::text IS NULL OR coalesce(p.queue_own, false) THEN p.queue
                ELSE %(queue)s::text END,
           CASE WHEN %(priority)s::int IS NULL OR coalesce(p.priority_own, false)
                THEN p.priority ELSE %(priority)s::int END,
           p.max_attempts, p.backoff, p.on_dep_failure,
           make_interval(secs => p.timeout_s), p.input, p.over, p.max_parallel, p.signal,
           make_interval(secs => p.max_wait_s), p.child_workflow_id, p."when", p.on_dep_skip,
           coalesce(%(run_at)s::timestamptz,
                    now() + (%(delay_us)s::bigint * interval '1 microsecond'), now()),
           %(traceparent)s::text
    FROM run, w
    CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') WITH ORDINALITY AS e(value, ord)
    CROSS JOIN LATERAL jsonb_to_record(e.value) AS p(
        node text, type text, call text, needs jsonb, queue text, queue_own boolean,
        priority int, priority_own boolean, max_attempts int, backoff jsonb,
        on_dep_failure text, timeout_s float8, input jsonb, over jsonb, max_parallel int,
        signal text, max_wait_s float8, child_workflow_id bigint, "when" text,
        on_dep_skip text)
    ORDER BY e.ord
), dep AS (
    INSERT INTO {schema}.cyclone_deps (run_id, node, depends_on)
    SELECT run.id, e.value->>'node', n.depends_on
    FROM run, w
    CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') AS e(value)
    CROSS JOIN LATERAL jsonb_array_elements_text(e.value->'needs') AS n(depends_on)
)
SELECT id FROM run

-- name: run_insert_many
-- Insert a chunk of new top runs of one stored definition in one statement (bulk submit,
-- Client.submit_many / enqueue_many): ids chosen by the caller, one input, run_at and
-- delay (microseconds) per run, in array order; no unique key, sequence, schedule or
-- owner (those runs take run_insert). The deadline counts as in run_insert; one trace
-- context %(traceparent)s for the chunk. Inserts nothing when the definition is not stored.
INSERT INTO {schema}.cyclone_runs
    (id, workflow_id, flow_name, input, output_limit, max_signal_wait, deadline, deadline_at,
     traceparent)
SELECT i.id, w.id, w.name, i.input, %(output_limit)s::integer,
    make_interval(secs => %(max_signal_wait_s)s::float8),
    make_interval(secs => (w.plan->>'deadline_s')::float8),
    greatest(statement_timestamp(),
             coalesce(i.run_at,
                      statement_timestamp() + (i.delay_us * interval '1 microsecond')))
        + make_interval(secs => (w.plan->>'deadline_s')::float8),
    %(traceparent)s::text
FROM {schema}.cyclone_workflows w
CROSS JOIN unnest(%(ids)s::uuid[], %(inputs)s::jsonb[], %(run_ats)s::timestamptz[],
                  %(delay_us)s::bigint[]) WITH ORDINALITY AS i(id, input, run_at, delay_us, ord)
WHERE w.id = %(workflow_id)s
ORDER BY i.ord

-- name: run_insert_child
-- Insert the run a child node starts, in the transaction that released that node: it
-- belongs to the parent's tree and inherits the parent run's limits and trace context
-- (never its unique key or sequence); its own flow's deadline counts from now, or from
-- %(not_before)s when the node belongs to a delayed run that has not started yet.
INSERT INTO {schema}.cyclone_runs
    (workflow_id, flow_name, input, parent_run_id, parent_node, root_run_id, output_limit,
     max_signal_wait, deadline, deadline_at, traceparent)
SELECT w.id, w.name, %(input)s::jsonb, p.id, %(node)s, coalesce(p.root_run_id, p.id),
       p.output_limit, p.max_signal_wait,
       make_interval(secs => (w.plan->>'deadline_s')::float8),
       greatest(statement_timestamp(), %(not_before)s::timestamptz)
           + make_interval(secs => (w.plan->>'deadline_s')::float8),
       p.traceparent
FROM {schema}.cyclone_workflows w, {schema}.cyclone_runs p
WHERE w.id = %(workflow_id)s AND p.id = %(parent_run_id)s
RETURNING id, root_run_id, traceparent

-- name: run_list
-- The most recent runs, newest first, optionally of one flow, one state and/or one
-- deployed revision of the flow.
SELECT r.id, r.flow_name, r.state, r.input, r.output, r.error, r.error_kind,
       r.created_at, r.finished_at, w.digest, r.parent_run_id, r.parent_node, r.deadline_at,
       r.rerun_of, r.revision
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE (%(flow)s::text IS NULL OR r.flow_name = %(flow)s)
  AND (%(state)s::text IS NULL OR r.state = %(state)s)
  AND (%(revision)s::int IS NULL OR r.revision = %(revision)s)
ORDER BY r.created_at DESC, r.id
LIMIT %(limit)s

-- name: run_list_ids_in_range
-- Ids between two uuids, lowest first, at most %(limit)s: the runs whose id starts with a
-- short hex prefix (the bounds are the prefix padded with 0s and fs; a primary-key range
-- scan).
SELECT id FROM {schema}.cyclone_runs
WHERE id >= %(low)s::uuid AND id <= %(high)s::uuid
ORDER BY id
LIMIT %(limit)s

-- name: run_list_failed
-- Ids of failed top runs (a child run is retried through its parent), optionally of one
-- flow, oldest first (operator retry --all-failed).
SELECT id FROM {schema}.cyclone_runs
WHERE state = 'failed' AND (%(flow)s::text IS NULL OR flow_name = %(flow)s)
  AND parent_run_id IS NULL
ORDER BY created_at, id

-- name: run_list_page
-- One page of runs, newest first, after the keyset (created_at, id) of the last row of the
-- previous page (no OFFSET), optionally of one flow, state, deployed revision, unique key
-- (cyclone_runs_unique_key_idx), created in [since, until), or with a step on one queue
-- (the dashboard's runs list). The queue test is a scalar subquery with LIMIT 1, so it is
-- probed per run along cyclone_runs_created_idx (cyclone_steps_run_node_key) until the page
-- is full, never a hash join over every step (no index on cyclone_steps.queue).
SELECT r.id, r.flow_name, r.state, r.input, r.output, r.error, r.error_kind,
       r.created_at, r.finished_at, w.digest, r.parent_run_id, r.parent_node, r.deadline_at,
       r.rerun_of, r.revision
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE (%(flow)s::text IS NULL OR r.flow_name = %(flow)s)
  AND (%(state)s::text IS NULL OR r.state = %(state)s)
  AND (%(revision)s::int IS NULL OR r.revision = %(revision)s)
  AND (%(unique_key)s::text IS NULL OR r.unique_key = %(unique_key)s)
  AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR r.created_at < %(until)s)
  AND (%(queue)s::text IS NULL OR (
        SELECT true FROM {schema}.cyclone_steps s
        WHERE s.run_id = r.id AND s.queue = %(queue)s LIMIT 1))
  AND (%(after_at)s::timestamptz IS NULL
       OR r.created_at < %(after_at)s
       OR (r.created_at = %(after_at)s AND r.id < %(after_id)s::uuid))
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s

-- name: run_list_past_deadline
-- Deadline scanner: running runs past their flow's deadline.
-- %(now)s pins the clock (tests; NULL: the database's now()).
SELECT id FROM {schema}.cyclone_runs
WHERE state = 'running' AND deadline_at IS NOT NULL
  AND deadline_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY deadline_at
LIMIT %(batch)s

-- name: run_list_stalled_sequences
-- Maintenance safety net: sequences whose first open run is still held (its predecessor
-- finished but no release happened, e.g. the releasing transaction skipped it).
SELECT h.sequence_key
FROM (SELECT DISTINCT sequence_key FROM {schema}.cyclone_runs WHERE sequence_held) k
CROSS JOIN LATERAL (
    SELECT r.sequence_key, r.sequence_held FROM {schema}.cyclone_runs r
    WHERE r.sequence_key = k.sequence_key AND r.state NOT IN ('completed', 'cancelled')
    ORDER BY r.sequence_pos
    LIMIT 1) h
WHERE h.sequence_held
LIMIT %(batch)s

-- name: run_lock
-- Take the run row lock that serialises every transition which can change the run's state
-- (Engine Design: Failure Propagation); returns the run's state. A child run locks the top
-- run of its tree first (ORDER BY: rows are locked in that order), so a transition that
-- crosses runs (a child completing its parent's node, a parent cancelling its children)
-- always takes the locks in one order and cannot deadlock.
SELECT id = %(run_id)s AS own, state
FROM {schema}.cyclone_runs
WHERE id = %(run_id)s
   OR id = (SELECT root_run_id FROM {schema}.cyclone_runs WHERE id = %(run_id)s)
ORDER BY own
FOR NO KEY UPDATE

-- name: run_lock_many
-- run_lock for the runs of a batch of completions (group commit): every root run
-- before the runs of its tree, roots in id order, then each tree's other runs in id order.
-- Every other transaction takes a tree's root lock before any other lock of that tree, so
-- the only locks two transactions can wait on in opposite orders are roots, which this
-- takes in one global order. Returns each run's id and state.
WITH target AS (
    SELECT unnest(%(run_ids)s::uuid[]) AS id
    UNION
    SELECT c.root_run_id FROM {schema}.cyclone_runs c
    WHERE c.id = ANY(%(run_ids)s::uuid[]) AND c.root_run_id IS NOT NULL
)
SELECT r.id, r.state
FROM {schema}.cyclone_runs r JOIN target t ON r.id = t.id
ORDER BY coalesce(r.root_run_id, r.id), r.root_run_id IS NOT NULL, r.id
FOR NO KEY UPDATE OF r

-- name: run_purge_if_terminal
-- Retention: delete up to %(batch)s terminal top runs (completed, failed, cancelled) whose
-- finished_at is older than now() - age; their steps, deps, signals and child runs go with
-- them through ON DELETE CASCADE (a child run is purged with its top run, never while that
-- run may still retry its node). SKIP LOCKED lets many clients purge at once, and a run an
-- operator is retrying (run row locked) is left for a later pass (Client Options:
-- WithRetentionSweep).
-- %(now)s pins the clock (tests; NULL: the database's now()).
DELETE FROM {schema}.cyclone_runs r
WHERE r.id IN (
        SELECT id FROM {schema}.cyclone_runs
        WHERE state <> 'running' AND parent_run_id IS NULL
          AND finished_at < coalesce(%(now)s::timestamptz, now())
                            - (%(age_us)s::bigint * interval '1 microsecond')
        ORDER BY finished_at
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED)
  AND r.state <> 'running'
RETURNING r.id

-- name: run_release_next_in_sequence_if_held
-- The first run of the sequence that is neither completed nor cancelled, when it is held:
-- held -> released (its roots are then released as at submit, by step_release_if_ready in
-- the same transaction). A held run locked by another transaction (its own cancel) is
-- skipped: that transaction releases after it. Returns the released run.
WITH head AS (
    SELECT id FROM {schema}.cyclone_runs
    WHERE sequence_key = %(key)s AND state NOT IN ('completed', 'cancelled')
    ORDER BY sequence_pos
    LIMIT 1
), held AS (
    SELECT r.id FROM {schema}.cyclone_runs r
    WHERE r.id = (SELECT id FROM head) AND r.sequence_held AND r.state = 'running'
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {schema}.cyclone_runs r SET sequence_held = false
FROM held WHERE r.id = held.id AND r.sequence_held AND r.state = 'running'
RETURNING r.id

-- name: run_reopen_if_terminal
-- failed | cancelled | completed (with a contained discard) -> running (operator retry);
-- a flow deadline starts again from now.
UPDATE {schema}.cyclone_runs
SET state = 'running', finished_at = NULL, error = NULL, error_kind = NULL, output = NULL,
    deadline_at = statement_timestamp() + deadline
WHERE id = %(run_id)s AND state IN ('failed', 'cancelled', 'completed')
RETURNING id

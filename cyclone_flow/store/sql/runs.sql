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
-- run_lock for the runs of a batch of completions (group commit, issue 8): every root run
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
                    AND s.state NOT IN ('completed', 'discarded', 'cancelled'))
RETURNING r.id, r.parent_run_id, r.parent_node, r.sequence_key

-- name: run_fail_if_running
-- running -> failed, once: a later discard finds the run terminal and changes nothing.
UPDATE {schema}.cyclone_runs
SET state = 'failed', finished_at = statement_timestamp(), error = %(error)s, error_kind = %(error_kind)s
WHERE id = %(run_id)s AND state = 'running'
RETURNING id, parent_run_id, parent_node

-- name: run_get
-- One run with its flow name and timestamps.
SELECT r.id, r.flow_name, r.state, r.input, r.output, r.error, r.error_kind,
       r.created_at, r.finished_at, w.digest, r.parent_run_id, r.parent_node, r.deadline_at
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE r.id = %(run_id)s

-- name: run_input_get
-- The input of one run as JSON text (output resolution of run.input references).
SELECT input::text FROM {schema}.cyclone_runs WHERE id = %(run_id)s

-- name: run_list
-- The most recent runs, newest first, optionally of one flow and/or one state.
SELECT r.id, r.flow_name, r.state, r.input, r.output, r.error, r.error_kind,
       r.created_at, r.finished_at, w.digest, r.parent_run_id, r.parent_node, r.deadline_at
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE (%(flow)s::text IS NULL OR r.flow_name = %(flow)s)
  AND (%(state)s::text IS NULL OR r.state = %(state)s)
ORDER BY r.created_at DESC, r.id
LIMIT %(limit)s

-- name: run_cancel_if_running
-- running -> cancelled (operator cancel); step_cancel_remaining follows in the same
-- transaction. Exactly one of a cancel and a racing completion wins: both take the run lock.
UPDATE {schema}.cyclone_runs
SET state = 'cancelled', finished_at = statement_timestamp(), error = %(error)s, error_kind = 'cancelled'
WHERE id = %(run_id)s AND state = 'running'
RETURNING id, parent_run_id, parent_node

-- name: run_reopen
-- failed | cancelled | completed (with a contained discard) -> running (operator retry);
-- a flow deadline starts again from now.
UPDATE {schema}.cyclone_runs
SET state = 'running', finished_at = NULL, error = NULL, error_kind = NULL, output = NULL,
    deadline_at = statement_timestamp() + deadline
WHERE id = %(run_id)s AND state IN ('failed', 'cancelled', 'completed')
RETURNING id

-- name: run_list_failed
-- Ids of failed top runs (a child run is retried through its parent), optionally of one
-- flow, oldest first (operator retry --all-failed).
SELECT id FROM {schema}.cyclone_runs
WHERE state = 'failed' AND (%(flow)s::text IS NULL OR flow_name = %(flow)s)
  AND parent_run_id IS NULL
ORDER BY created_at, id

-- name: run_definition_get
-- The flow definition (the flow file as JSON) a run was submitted with (graph --run).
SELECT w.definition
FROM {schema}.cyclone_runs r
JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
WHERE r.id = %(run_id)s

-- Child runs and run deadlines (Engine Design: Why Static DAGs: "A child node starts a
-- separate run of a second workflow and waits for the result"; Failure Propagation).

-- name: run_insert_child
-- Insert the run a child node starts, in the transaction that released that node: it
-- belongs to the parent's tree and inherits the parent run's limits (never its unique key
-- or sequence); its own flow's deadline counts from now, or from %(not_before)s when the
-- node belongs to a delayed run that has not started yet.
INSERT INTO {schema}.cyclone_runs
    (workflow_id, flow_name, input, parent_run_id, parent_node, root_run_id, output_limit,
     max_signal_wait, deadline, deadline_at)
SELECT w.id, w.name, %(input)s::jsonb, p.id, %(node)s, coalesce(p.root_run_id, p.id),
       p.output_limit, p.max_signal_wait,
       make_interval(secs => (w.plan->>'deadline_s')::float8),
       greatest(statement_timestamp(), %(not_before)s::timestamptz)
           + make_interval(secs => (w.plan->>'deadline_s')::float8)
FROM {schema}.cyclone_workflows w, {schema}.cyclone_runs p
WHERE w.id = %(workflow_id)s AND p.id = %(parent_run_id)s
RETURNING id, root_run_id

-- name: run_cancel_tree
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
      AND s.state NOT IN ('completed', 'discarded', 'cancelled')
    RETURNING s.run_id
)
SELECT id, (SELECT count(*) FROM steps) FROM runs

-- name: run_find_past_deadline
-- Deadline scanner: running runs past their flow's deadline.
SELECT id FROM {schema}.cyclone_runs
WHERE state = 'running' AND deadline_at IS NOT NULL AND deadline_at <= now()
ORDER BY deadline_at
LIMIT %(batch)s

-- name: run_fail_deadline
-- Deadline scanner: running -> failed with error_kind deadline, guarded by deadline_at (a
-- run that finished or was retried meanwhile is stale). step_cancel_remaining follows.
UPDATE {schema}.cyclone_runs
SET state = 'failed', finished_at = statement_timestamp(), error_kind = 'deadline',
    error = format('run passed its deadline of %%s (at %%s)', deadline, deadline_at)
WHERE id = %(run_id)s AND state = 'running' AND deadline_at IS NOT NULL
  AND deadline_at <= now()
RETURNING id, parent_run_id, parent_node, error

-- name: step_complete_from_child
-- A child run completed, in its completion transaction: the child node waiting for it ->
-- completed with the child run's output, or -> discarded with payload_too_large when that
-- output is over the output limit of the client that submitted the run.
UPDATE {schema}.cyclone_steps p
SET state = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647)
                 THEN 'completed' ELSE 'discarded' END,
    output = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647) THEN c.output END,
    error = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647) THEN NULL
                 ELSE format('output of child run %%s is %%s bytes, over the limit of %%s bytes',
                             c.id, c.size, pr.output_limit) END,
    error_kind = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647)
                      THEN NULL ELSE 'payload_too_large' END,
    finished_at = statement_timestamp()
FROM (SELECT id, output, octet_length(output::text) AS size FROM {schema}.cyclone_runs
      WHERE id = %(child_run_id)s) c,
     {schema}.cyclone_runs pr
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'
  AND p.child_run_id = %(child_run_id)s AND pr.id = p.run_id
RETURNING p.state, p.error

-- Nodes that wait without a worker (child and wait_signal nodes, fan-out nodes while their
-- items run): they sit in state waiting, never claimed; the engine completes or discards
-- them in the transaction of the event that decides them, under the run row lock.

-- name: step_complete_waiting
-- waiting -> completed with %(output)s (a signal's payload, a child run's output).
UPDATE {schema}.cyclone_steps
SET state = 'completed', output = %(output)s, finished_at = statement_timestamp()
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
RETURNING node

-- name: step_discard_waiting
-- waiting -> discarded with an error (a bad fan-out list, a failed child or item, an
-- expired wait); the error joins the step's error history. With %(child_run_id)s set,
-- only while the node still waits for that child run.
UPDATE {schema}.cyclone_steps
SET state = 'discarded', finished_at = statement_timestamp(), error = %(error)s,
    error_kind = %(error_kind)s,
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'error', %(error)s::text, 'error_kind', %(error_kind)s::text,
        'traceback', NULL, 'at', statement_timestamp()))
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
  AND (%(child_run_id)s::uuid IS NULL OR child_run_id = %(child_run_id)s::uuid)
RETURNING node, child_run_id

-- name: step_start_wait
-- A child or wait_signal node starts waiting: wait_until = now() (or the start of a
-- delayed run, when later) + max_wait, where a wait_signal node without max_wait takes the
-- max_signal_wait of the client that submitted the run (Client Options: WithMaxSignalWait);
-- NULL waits without a bound.
UPDATE {schema}.cyclone_steps s
SET wait_until = greatest(s.scheduled_at, statement_timestamp())
        + coalesce(s.max_wait, CASE WHEN s.type = 'wait_signal' THEN r.max_signal_wait END)
FROM {schema}.cyclone_runs r
WHERE r.id = s.run_id AND s.run_id = %(run_id)s AND s.node = %(node)s AND s.state = 'waiting'
RETURNING s.wait_until

-- name: step_set_child_run
-- Record the child run a waiting child node started.
UPDATE {schema}.cyclone_steps
SET child_run_id = %(child_run_id)s
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'

-- name: step_find_expired_waits
-- Wait scanner: waiting child and wait_signal nodes past wait_until.
SELECT run_id, node, type, signal, child_run_id,
       extract(epoch FROM wait_until - started_at)::float8 AS waited_s
FROM {schema}.cyclone_steps
WHERE state = 'waiting' AND wait_until IS NOT NULL AND wait_until <= now()
ORDER BY wait_until
LIMIT %(batch)s

-- name: step_expire_wait
-- Wait scanner: waiting -> discarded with error_kind timeout, guarded by wait_until (a
-- signal or a child that finished meanwhile wins; zero rows is stale).
UPDATE {schema}.cyclone_steps
SET state = 'discarded', finished_at = statement_timestamp(), error = %(error)s,
    error_kind = 'timeout',
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'error', %(error)s::text, 'error_kind', 'timeout',
        'traceback', NULL, 'at', statement_timestamp()))
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
  AND wait_until IS NOT NULL AND wait_until <= now()
RETURNING type, child_run_id

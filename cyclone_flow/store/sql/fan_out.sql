-- Fan-out nodes and their item steps (Engine Design: Why Static DAGs: "During the run, the
-- engine makes item tasks for that node. The engine inserts those tasks in the
-- transaction that completes the upstream step."; Client Options: Limits and Retention).
-- Every statement runs under the run row lock of the transaction that caused it.

-- name: step_node_info
-- What the engine needs to start a released fan_out, child or wait_signal node
-- (not_before: the start of a delayed run that has not started yet).
SELECT s.type, s.queue, s.input, s.over, s.signal, s.child_workflow_id,
       w.definition->'input_schema' AS child_input_schema,
       CASE WHEN s.scheduled_at > statement_timestamp() THEN s.scheduled_at END AS not_before
FROM {schema}.cyclone_steps s
LEFT JOIN {schema}.cyclone_workflows w ON w.id = s.child_workflow_id
WHERE s.run_id = %(run_id)s AND s.node = %(node)s

-- name: fan_out_list_shape
-- The JSON type and length of the list a fan-out node iterates: a literal list, a part of
-- the run input, or a part of an upstream output (path as text[]; NULL when missing).
-- The list itself stays in the database.
SELECT jsonb_typeof(l.list),
       CASE WHEN jsonb_typeof(l.list) = 'array' THEN jsonb_array_length(l.list) END
FROM (SELECT CASE
          WHEN %(literal)s::jsonb IS NOT NULL THEN %(literal)s::jsonb
          WHEN %(from_node)s::text IS NULL
              THEN (SELECT r.input #> %(path)s::text[] FROM {schema}.cyclone_runs r
                    WHERE r.id = %(run_id)s)
          ELSE (SELECT u.output #> %(path)s::text[] FROM {schema}.cyclone_steps u
                WHERE u.run_id = %(run_id)s AND u.node = %(from_node)s)
      END AS list) l

-- name: fan_out_insert_items
-- One item step per list element, in one INSERT ... SELECT over jsonb_array_elements:
-- named NODE[i] (0-based), with the node's call, queue, priority, retry and timeout; the
-- first max_parallel items available, the rest pending, none claimable before the node's
-- scheduled_at (a delayed run). Items that exist already (an operator retry expands the
-- node again) are kept as they are.
INSERT INTO {schema}.cyclone_steps
    (run_id, root_run_id, node, type, call, state, queue, priority, max_attempts, backoff,
     timeout, input, parent_node, item_index, item, scheduled_at)
SELECT p.run_id, p.root_run_id, p.node || '[' || (e.ord - 1) || ']', 'fan_out_item', p.call,
       CASE WHEN p.max_parallel IS NULL OR e.ord <= p.max_parallel
            THEN 'available' ELSE 'pending' END,
       p.queue, p.priority, p.max_attempts, p.backoff, p.timeout, p.input, p.node,
       (e.ord - 1)::int, e.value, greatest(p.scheduled_at, statement_timestamp())
FROM {schema}.cyclone_steps p
CROSS JOIN LATERAL jsonb_array_elements(CASE
          WHEN %(literal)s::jsonb IS NOT NULL THEN %(literal)s::jsonb
          WHEN %(from_node)s::text IS NULL
              THEN (SELECT r.input #> %(path)s::text[] FROM {schema}.cyclone_runs r
                    WHERE r.id = %(run_id)s)
          ELSE (SELECT u.output #> %(path)s::text[] FROM {schema}.cyclone_steps u
                WHERE u.run_id = %(run_id)s AND u.node = %(from_node)s)
      END) WITH ORDINALITY AS e(value, ord)
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'
ORDER BY e.ord
ON CONFLICT (run_id, node) DO NOTHING

-- name: fan_out_set_total
-- Record a started fan-out node's item count and how many of its items completed already
-- (zero, unless an operator retry expands it again).
UPDATE {schema}.cyclone_steps p
SET items_total = %(total)s,
    items_done = (SELECT count(*) FROM {schema}.cyclone_steps i
                  WHERE i.run_id = p.run_id AND i.parent_node = p.node
                    AND i.state = 'completed')
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'
RETURNING p.items_done, p.items_total

-- name: fan_out_release_items
-- pending -> available for the next items of a fan-out node, in item order, until
-- max_parallel items are available or running (all of them without max_parallel). Each
-- item's terminal transition calls it, so max_parallel holds across every worker without
-- touching the claim.
UPDATE {schema}.cyclone_steps s
SET state = 'available', scheduled_at = greatest(s.scheduled_at, statement_timestamp())
WHERE s.id IN (
        SELECT i.id FROM {schema}.cyclone_steps i
        WHERE i.run_id = %(run_id)s AND i.parent_node = %(node)s AND i.state = 'pending'
        ORDER BY i.item_index
        LIMIT coalesce((
            SELECT CASE WHEN p.max_parallel IS NULL THEN 2147483647
                        ELSE greatest(0, p.max_parallel - (
                            SELECT count(*) FROM {schema}.cyclone_steps a
                            WHERE a.run_id = p.run_id AND a.parent_node = p.node
                              AND a.state IN ('available', 'running'))) END
            FROM {schema}.cyclone_steps p
            WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'), 0))
  AND s.state = 'pending'
RETURNING s.queue

-- name: fan_out_item_done
-- %(n)s items of a waiting fan-out node completed (1, or more in a group commit): count
-- them on the node and, unless they were the last ones, release the next pending items up
-- to max_parallel (as fan_out_release_items), in one statement. Returns the node's done and
-- total counts and the queue of the items released (NULL: none).
WITH parent AS (
    UPDATE {schema}.cyclone_steps
    SET items_done = items_done + %(n)s
    WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
    RETURNING run_id, node, items_done, items_total, max_parallel, queue
), released AS (
    UPDATE {schema}.cyclone_steps s
    SET state = 'available', scheduled_at = greatest(s.scheduled_at, statement_timestamp())
    WHERE s.id IN (
            SELECT i.id FROM {schema}.cyclone_steps i
            WHERE i.run_id = %(run_id)s AND i.parent_node = %(node)s AND i.state = 'pending'
            ORDER BY i.item_index
            LIMIT coalesce((
                SELECT CASE WHEN p.items_done >= p.items_total THEN 0
                            WHEN p.max_parallel IS NULL THEN 2147483647
                            ELSE greatest(0, p.max_parallel - (
                                SELECT count(*) FROM {schema}.cyclone_steps a
                                WHERE a.run_id = %(run_id)s AND a.parent_node = %(node)s
                                  AND a.state IN ('available', 'running'))) END
                FROM parent p), 0))
      AND s.state = 'pending'
    RETURNING s.id
)
SELECT p.items_done, p.items_total,
       CASE WHEN EXISTS (SELECT 1 FROM released) THEN p.queue END
FROM parent p

-- name: fan_out_complete
-- waiting -> completed with the item outputs in item order (jsonb_agg), or -> discarded
-- with payload_too_large when that list is over the output limit of the client that
-- submitted the run (Client Options: Limits and Retention).
UPDATE {schema}.cyclone_steps p
SET state = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647)
                 THEN 'completed' ELSE 'discarded' END,
    output = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647) THEN a.list END,
    error = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647) THEN NULL
                 ELSE format('collected output of %%s items is %%s bytes, over the limit of %%s bytes',
                             p.items_total, a.size, r.output_limit) END,
    error_kind = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647)
                      THEN NULL ELSE 'payload_too_large' END,
    finished_at = statement_timestamp()
FROM (SELECT l.list, octet_length(l.list::text) AS size
      FROM (SELECT coalesce(jsonb_agg(i.output ORDER BY i.item_index), '[]'::jsonb) AS list
            FROM {schema}.cyclone_steps i
            WHERE i.run_id = %(run_id)s AND i.parent_node = %(node)s) l) a,
     {schema}.cyclone_runs r
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting' AND r.id = p.run_id
RETURNING p.state, p.error

-- name: fan_out_cancel_items
-- Every unfinished item of a fan-out node -> cancelled (the node was discarded or
-- cancelled); a running item learns it on its next heartbeat.
UPDATE {schema}.cyclone_steps
SET state = 'cancelled', finished_at = statement_timestamp(), lease_expiry = NULL,
    error = %(error)s, error_kind = 'cancelled'
WHERE run_id = %(run_id)s AND parent_node = %(node)s
  AND state NOT IN ('completed', 'discarded', 'cancelled')
RETURNING node

-- name: fan_out_progress
-- Item counts per fan-out node and state, for status.
SELECT parent_node, state, count(*)
FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND parent_node IS NOT NULL
GROUP BY parent_node, state

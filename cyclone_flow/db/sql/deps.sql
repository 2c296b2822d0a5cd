-- Table cyclone_deps: the graph of a run as data, one row per (node, depends_on) edge.
-- Defined by migration 0001_initial.

-- name: dep_insert_plan
-- Write the run's graph as data from its definition's compiled plan: one row per
-- (node, depends_on) edge.
INSERT INTO {schema}.cyclone_deps (run_id, node, depends_on)
SELECT %(run_id)s, e.value->>'node', n.depends_on
FROM {schema}.cyclone_workflows w
CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') AS e(value)
CROSS JOIN LATERAL jsonb_array_elements_text(e.value->'needs') AS n(depends_on)
WHERE w.id = %(workflow_id)s

-- name: dep_insert_plan_many
-- Write the graphs of a chunk of new runs of one definition from its compiled plan (bulk
-- submit): one row per (run, node, depends_on) edge; the plan's edges read once.
WITH edge AS MATERIALIZED (
    SELECT e.value->>'node' AS node, n.depends_on
    FROM {schema}.cyclone_workflows w
    CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') AS e(value)
    CROSS JOIN LATERAL jsonb_array_elements_text(e.value->'needs') AS n(depends_on)
    WHERE w.id = %(workflow_id)s
)
INSERT INTO {schema}.cyclone_deps (run_id, node, depends_on)
SELECT r.run_id, edge.node, edge.depends_on
FROM unnest(%(run_ids)s::uuid[]) AS r(run_id)
CROSS JOIN edge

-- name: dep_list_downstream
-- Every node downstream of %(node)s (transitively) with its on_dep_failure policy.
WITH RECURSIVE down(node) AS (
    SELECT d.node FROM {schema}.cyclone_deps d
    WHERE d.run_id = %(run_id)s AND d.depends_on = %(node)s
    UNION
    SELECT d.node FROM {schema}.cyclone_deps d
    JOIN down ON d.depends_on = down.node
    WHERE d.run_id = %(run_id)s
)
SELECT s.node, s.on_dep_failure
FROM {schema}.cyclone_steps s
JOIN down ON down.node = s.node
WHERE s.run_id = %(run_id)s

-- name: dep_list
-- Every (node, depends_on) edge of a run, by node then dependency ("why is it waiting").
SELECT node, depends_on FROM {schema}.cyclone_deps
WHERE run_id = %(run_id)s
ORDER BY node, depends_on

-- name: dep_insert_many
-- Write the run's graph as data: one row per (node, depends_on) edge.
INSERT INTO {schema}.cyclone_deps (run_id, node, depends_on)
SELECT %(run_id)s, t.node, t.depends_on
FROM unnest(%(nodes)s::text[], %(depends_on)s::text[]) AS t(node, depends_on)

-- name: dep_downstream
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

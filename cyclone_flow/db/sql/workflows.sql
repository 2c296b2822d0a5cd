-- Table cyclone_workflows: flow definitions, content-addressed by (name, digest), with
-- their compiled plan. Defined by migrations 0001_initial and 0002_node_types (plan).

-- name: workflow_fill_plan_if_missing
-- Give a definition stored before plans existed its compiled plan (same digest, same plan).
UPDATE {schema}.cyclone_workflows SET plan = %(plan)s WHERE id = %(id)s AND plan IS NULL

-- name: workflow_upsert
-- Store a flow definition and its compiled plan once per (name, digest) and return its id
-- (content-addressed), and whether the stored row lacks a plan (written before plans).
WITH ins AS (
    INSERT INTO {schema}.cyclone_workflows (name, digest, definition, plan)
    VALUES (%(name)s, %(digest)s, %(definition)s, %(plan)s)
    ON CONFLICT (name, digest) DO NOTHING
    RETURNING id, false AS no_plan
)
SELECT id, no_plan FROM ins
UNION ALL
SELECT id, plan IS NULL FROM {schema}.cyclone_workflows WHERE name = %(name)s AND digest = %(digest)s
LIMIT 1

-- Table cyclone_workflows: flow definitions, content-addressed by (name, digest), with
-- their compiled plan. Defined by migrations 0001_initial and 0002_node_types (plan).

-- name: workflow_exists
-- Whether definition %(id)s is stored (a remembered id checked after an insert found none).
SELECT EXISTS (SELECT 1 FROM {schema}.cyclone_workflows WHERE id = %(id)s)

-- name: workflow_fill_plan_if_missing
-- Give a definition stored before plans existed its compiled plan (same digest, same plan).
UPDATE {schema}.cyclone_workflows SET plan = %(plan)s WHERE id = %(id)s AND plan IS NULL

-- name: workflow_get
-- One stored definition by id, with its first use (when it was stored) and last use.
SELECT w.id, w.name, w.digest, w.definition, w.created_at,
       (SELECT max(r.created_at) FROM {schema}.cyclone_runs r WHERE r.workflow_id = w.id)
         AS last_used_at
FROM {schema}.cyclone_workflows w
WHERE w.id = %(id)s

-- name: workflow_list
-- Stored definitions, newest first, at most %(limit)s, optionally of one flow name: first
-- use (when stored) and the creation time of its newest run (dashboard's flows page).
SELECT w.id, w.name, w.digest, NULL::jsonb AS definition, w.created_at, last.created_at AS last_used_at
FROM {schema}.cyclone_workflows w
LEFT JOIN LATERAL (
    SELECT r.created_at FROM {schema}.cyclone_runs r
    WHERE r.workflow_id = w.id ORDER BY r.created_at DESC LIMIT 1) last ON true
WHERE (%(name)s::text IS NULL OR w.name = %(name)s)
ORDER BY w.created_at DESC, w.id DESC
LIMIT %(limit)s

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

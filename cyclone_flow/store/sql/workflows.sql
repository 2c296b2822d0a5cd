-- name: workflow_upsert
-- Store a flow definition once per (name, digest) and return its id (content-addressed).
WITH ins AS (
    INSERT INTO {schema}.cyclone_workflows (name, digest, definition)
    VALUES (%(name)s, %(digest)s, %(definition)s)
    ON CONFLICT (name, digest) DO NOTHING
    RETURNING id
)
SELECT id FROM ins
UNION ALL
SELECT id FROM {schema}.cyclone_workflows WHERE name = %(name)s AND digest = %(digest)s
LIMIT 1

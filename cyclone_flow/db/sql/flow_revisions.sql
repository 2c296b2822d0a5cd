-- Table cyclone_flow_revisions: the deployed revisions of each flow name, and (table
-- cyclone_flows) which one is current (deploy, rollback, retire; submit by name). Defined by
-- migration 0016_flow_revisions.

-- name: flow_lock_deploys
-- deploy, rollback, retire: serialise every change of the deployed flows of this schema for
-- the rest of the transaction (self-exclusive; readers and submits by name, which only
-- read, are not blocked). A second deploy waits, then sees the first one's revisions.
LOCK TABLE {schema}.cyclone_flows IN SHARE ROW EXCLUSIVE MODE

-- name: flow_get
-- One deployed flow by name: its current revision, whether it is retired, and the current
-- revision's deploy facts (when, by whom, commit, kind, digest; runs_last_day not counted).
SELECT f.name, f.current_revision, f.retired_at, f.retired_by, f.updated_at,
       v.deployed_at, v.deployed_by, v.git_commit, v.kind, v.rollback_of, w.digest,
       NULL::bigint AS runs_last_day
FROM {schema}.cyclone_flows f
JOIN {schema}.cyclone_flow_revisions v
  ON v.flow_name = f.name AND v.revision = f.current_revision
JOIN {schema}.cyclone_workflows w ON w.id = v.workflow_id
WHERE f.name = %(name)s

-- name: flow_get_for_submit
-- submit by name: the deployed flow %(name)s, its row locked FOR SHARE until the submit
-- commits (a concurrent retire waits for it; another submit does not).
SELECT f.name, f.current_revision, f.retired_at, f.retired_by, f.updated_at,
       NULL::timestamptz AS deployed_at, NULL::text AS deployed_by, NULL::text AS git_commit,
       NULL::text AS kind, NULL::int AS rollback_of, NULL::text AS digest,
       NULL::bigint AS runs_last_day
FROM {schema}.cyclone_flows f
WHERE f.name = %(name)s
FOR SHARE

-- name: flow_list
-- Every deployed flow by name, with its current revision's deploy facts (when, by whom,
-- commit, kind) and the number of its runs created in the last day, counted among the
-- newest %(cap)s runs of that day (one range of cyclone_runs_created_idx for all flows).
WITH day AS (
    SELECT r.flow_name FROM {schema}.cyclone_runs r
    WHERE r.created_at > now() - interval '1 day'
    ORDER BY r.created_at DESC
    LIMIT %(cap)s
), counts AS (
    SELECT flow_name, count(*) AS n FROM day GROUP BY flow_name
)
SELECT f.name, f.current_revision, f.retired_at, f.retired_by, f.updated_at,
       v.deployed_at, v.deployed_by, v.git_commit, v.kind, v.rollback_of, w.digest,
       coalesce(c.n, 0) AS runs_last_day
FROM {schema}.cyclone_flows f
JOIN {schema}.cyclone_flow_revisions v
  ON v.flow_name = f.name AND v.revision = f.current_revision
JOIN {schema}.cyclone_workflows w ON w.id = v.workflow_id
LEFT JOIN counts c ON c.flow_name = f.name
ORDER BY f.name

-- name: flow_set_current
-- deploy, rollback: make %(revision)s the current revision of flow %(name)s (a retired flow
-- deployed again is active again). Returns the previous current revision (NULL: new).
WITH prev AS (
    SELECT current_revision FROM {schema}.cyclone_flows WHERE name = %(name)s
), up AS (
    INSERT INTO {schema}.cyclone_flows AS f (name, current_revision)
    VALUES (%(name)s, %(revision)s)
    ON CONFLICT (name) DO UPDATE
    SET current_revision = EXCLUDED.current_revision, retired_at = NULL, retired_by = NULL,
        updated_at = now()
    RETURNING f.name
)
SELECT (SELECT current_revision FROM prev) AS previous FROM up

-- name: flow_retire_if_active
-- flows retire: mark flow %(name)s retired by %(by)s, only when it is not retired yet;
-- returns its name, no row when it is unknown or already retired.
UPDATE {schema}.cyclone_flows
SET retired_at = now(), retired_by = %(by)s, updated_at = now()
WHERE name = %(name)s AND retired_at IS NULL
RETURNING name

-- name: revision_insert
-- deploy, rollback: store the next revision of flow %(flow_name)s (max + 1, from 1; the
-- caller holds flow_lock_deploys). Returns the revision and its deployed_at.
INSERT INTO {schema}.cyclone_flow_revisions
    (flow_name, revision, workflow_id, source, source_path, kind, rollback_of, deployed_by,
     git_commit, git_path, git_dirty)
SELECT %(flow_name)s,
       coalesce((SELECT max(revision) FROM {schema}.cyclone_flow_revisions
                 WHERE flow_name = %(flow_name)s), 0) + 1,
       %(workflow_id)s, %(source)s, %(source_path)s, %(kind)s, %(rollback_of)s::int,
       %(deployed_by)s, %(git_commit)s::text, %(git_path)s::text, %(git_dirty)s::boolean
RETURNING revision, deployed_at

-- name: revision_get
-- One revision of flow %(flow_name)s (NULL %(revision)s: the current one) with its source,
-- its definition document and digest, and whether it is current.
SELECT v.flow_name, v.revision, v.workflow_id, v.kind, v.rollback_of, v.deployed_at,
       v.deployed_by, v.git_commit, v.git_path, v.git_dirty, v.source_path, w.digest,
       (f.current_revision = v.revision) AS current, f.retired_at,
       v.source, w.definition, NULL::bigint AS runs
FROM {schema}.cyclone_flows f
JOIN {schema}.cyclone_flow_revisions v ON v.flow_name = f.name
JOIN {schema}.cyclone_workflows w ON w.id = v.workflow_id
WHERE f.name = %(flow_name)s
  AND v.revision = coalesce(%(revision)s::int, f.current_revision)

-- name: revision_list
-- Every revision of flow %(flow_name)s, newest first, without source or definition, with
-- the number of runs submitted with each (flows history; cyclone_runs_revision_idx).
SELECT v.flow_name, v.revision, v.workflow_id, v.kind, v.rollback_of, v.deployed_at,
       v.deployed_by, v.git_commit, v.git_path, v.git_dirty, v.source_path, w.digest,
       (f.current_revision = v.revision) AS current, f.retired_at,
       NULL::text AS source, NULL::jsonb AS definition,
       (SELECT count(*) FROM {schema}.cyclone_runs r
        WHERE r.flow_name = v.flow_name AND r.revision = v.revision) AS runs
FROM {schema}.cyclone_flows f
JOIN {schema}.cyclone_flow_revisions v ON v.flow_name = f.name
JOIN {schema}.cyclone_workflows w ON w.id = v.workflow_id
WHERE f.name = %(flow_name)s
ORDER BY v.revision DESC

-- name: revision_list_waiting_runs
-- deploy's compatibility check: the running top runs of flow %(flow_name)s none of whose
-- steps ever started or has become claimable yet (delayed to a later run_at, or held by
-- their sequence): every step pending or available, none with a started_at (a claim sets
-- it and a give-back keeps it), none available with scheduled_at <= now().
-- id and input (JSON text), at most %(limit)s, oldest first.
SELECT r.id, r.input::text AS input
FROM {schema}.cyclone_runs r
WHERE r.flow_name = %(flow_name)s AND r.state = 'running' AND r.parent_run_id IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.cyclone_steps s
      WHERE s.run_id = r.id
        AND (s.state NOT IN ('pending', 'available') OR s.started_at IS NOT NULL
             OR (s.state = 'available' AND s.scheduled_at <= now())))
ORDER BY r.created_at, r.id
LIMIT %(limit)s

-- Table cyclone_schedules: cron schedules that submit runs of a stored definition.
-- Defined by migration 0003_queue_features.

-- name: schedule_advance_if_unchanged
-- Scanner: the tick's compare-and-swap, in the transaction that inserted its run: moves
-- next_run_at forward only from the value this scanner read; zero rows = another client
-- already did (the transaction then rolls back with its run).
UPDATE {schema}.cyclone_schedules
SET next_run_at = %(next_run_at)s, last_run_at = %(tick)s, last_run_id = %(run_id)s,
    updated_at = now()
WHERE id = %(id)s AND next_run_at = %(expected)s
RETURNING id

-- name: schedule_delete
-- schedule remove: delete one schedule by name.
DELETE FROM {schema}.cyclone_schedules WHERE name = %(name)s RETURNING id

-- name: schedule_delete_flow_stale
-- schedule sync: remove the flow-file schedules of a flow that the file no longer declares.
DELETE FROM {schema}.cyclone_schedules
WHERE flow_name = %(flow_name)s AND source = 'flow' AND NOT (name = ANY(%(keep)s::text[]))
RETURNING name

-- name: schedule_get
-- One schedule by name (schedule show; deploy's schedule plan).
SELECT id, name, flow_name, cron, timezone, input, source, paused, next_run_at,
       last_run_at, last_run_id, revision
FROM {schema}.cyclone_schedules WHERE name = %(name)s

-- name: schedule_get_positional
-- schedule sync: the schedule of this flow that an earlier version named by its position in
-- the flow file ('<flow>' or '<flow>-<n>') and that has the cron, timezone and input of an
-- unnamed entry, unless another entry of the file takes its name: the entry keeps it (its
-- name, pause state, next tick and last fire) instead of a new '<flow>-<digest>' row.
SELECT name FROM {schema}.cyclone_schedules
WHERE flow_name = %(flow_name)s AND source = 'flow'
  AND cron = %(cron)s AND timezone = %(timezone)s AND input = %(input)s::jsonb
  AND (name = flow_name
       OR (left(name, length(flow_name) + 1) = flow_name || '-'
           AND substr(name, length(flow_name) + 2) ~ '^[0-9]+$'))
  AND NOT (name = ANY(%(taken)s::text[]))
ORDER BY id
LIMIT 1

-- name: schedule_get_source
-- The source ('flow' or 'manual') of a schedule, to refuse overwriting one with the other.
SELECT source FROM {schema}.cyclone_schedules WHERE name = %(name)s

-- name: schedule_list
-- Every schedule, by name.
SELECT id, name, flow_name, cron, timezone, input, source, paused, next_run_at,
       last_run_at, last_run_id, revision
FROM {schema}.cyclone_schedules
ORDER BY name

-- name: schedule_list_due
-- Scanner: unpaused schedules whose next tick is at or before %(now)s: id, name and a
-- digest of the whole row (the scanner retries a failing schedule at once when it changed).
SELECT id, name, md5(s::text) AS version FROM {schema}.cyclone_schedules s
WHERE NOT paused AND next_run_at <= %(now)s
ORDER BY next_run_at, id
LIMIT %(batch)s

-- name: schedule_lock_due
-- Scanner: lock one due schedule for the tick's transaction; SKIP LOCKED leaves it to the
-- client that already holds it. Returns the stored definition to submit (and whether it
-- lacks its compiled plan: stored before plans existed), and whether its flow is a
-- retired deployed flow (the tick is then refused).
SELECT s.id, s.name, s.flow_name, s.cron, s.timezone, s.input::text AS input, s.next_run_at,
       w.definition, w.id AS workflow_id, w.plan IS NULL AS no_plan, s.revision,
       EXISTS (SELECT 1 FROM {schema}.cyclone_flows f
               WHERE f.name = s.flow_name AND f.retired_at IS NOT NULL) AS retired
FROM {schema}.cyclone_schedules s
JOIN {schema}.cyclone_workflows w ON w.id = s.workflow_id
WHERE s.id = %(id)s AND NOT s.paused AND s.next_run_at <= %(now)s
FOR NO KEY UPDATE OF s SKIP LOCKED

-- name: schedule_lock_named
-- schedule trigger: lock one schedule by name, paused or not, due or not, for the
-- transaction that inserts a run of it now (waits for a scanner's tick of it to commit).
SELECT s.id, s.name, s.flow_name, s.cron, s.timezone, s.input::text AS input, s.next_run_at,
       w.definition, w.id AS workflow_id, w.plan IS NULL AS no_plan, s.revision,
       EXISTS (SELECT 1 FROM {schema}.cyclone_flows f
               WHERE f.name = s.flow_name AND f.retired_at IS NOT NULL) AS retired
FROM {schema}.cyclone_schedules s
JOIN {schema}.cyclone_workflows w ON w.id = s.workflow_id
WHERE s.name = %(name)s
FOR NO KEY UPDATE OF s

-- name: schedule_set_last_run
-- schedule trigger: record a triggered run as the schedule's last run; next_run_at is left
-- alone (the cadence goes on).
UPDATE {schema}.cyclone_schedules
SET last_run_at = %(at)s, last_run_id = %(run_id)s, updated_at = now()
WHERE id = %(id)s
RETURNING id

-- name: schedule_set_paused
-- schedule pause / resume. Resuming recomputes nothing here: the caller passes the next
-- tick after now, so the ticks missed while paused are skipped.
UPDATE {schema}.cyclone_schedules
SET paused = %(paused)s,
    next_run_at = coalesce(%(next_run_at)s::timestamptz, next_run_at),
    updated_at = now()
WHERE name = %(name)s
RETURNING id

-- name: schedule_upsert
-- Create or update a schedule by name (schedule add, schedule sync, deploy; %(revision)s:
-- the deployed revision whose definition it submits, NULL from a file). next_run_at is kept
-- when neither the cron expression nor the timezone changed, so a re-sync neither skips
-- nor repeats a tick; paused is kept too.
INSERT INTO {schema}.cyclone_schedules AS s
    (name, flow_name, workflow_id, cron, timezone, input, source, next_run_at, revision)
VALUES (%(name)s, %(flow_name)s, %(workflow_id)s, %(cron)s, %(timezone)s, %(input)s,
        %(source)s, %(next_run_at)s, %(revision)s::int)
ON CONFLICT (name) DO UPDATE
SET flow_name = EXCLUDED.flow_name,
    workflow_id = EXCLUDED.workflow_id,
    revision = EXCLUDED.revision,
    input = EXCLUDED.input,
    source = EXCLUDED.source,
    next_run_at = CASE WHEN s.cron = EXCLUDED.cron AND s.timezone = EXCLUDED.timezone
                       THEN s.next_run_at ELSE EXCLUDED.next_run_at END,
    cron = EXCLUDED.cron,
    timezone = EXCLUDED.timezone,
    updated_at = now()
RETURNING id, (xmax = 0) AS inserted

-- name: schedule_set_revision_for_flow
-- deploy, rollback: point every schedule of flow %(flow_name)s (those added by hand too) at
-- the definition %(workflow_id)s of its new current revision %(revision)s. Returns their
-- names.
UPDATE {schema}.cyclone_schedules
SET workflow_id = %(workflow_id)s, revision = %(revision)s, updated_at = now()
WHERE flow_name = %(flow_name)s
  AND (workflow_id <> %(workflow_id)s OR revision IS DISTINCT FROM %(revision)s::int)
RETURNING name

-- name: schedule_pause_for_flow
-- flows retire: pause every unpaused schedule of flow %(flow_name)s. Returns their names.
UPDATE {schema}.cyclone_schedules
SET paused = true, updated_at = now()
WHERE flow_name = %(flow_name)s AND NOT paused
RETURNING name

-- name: schedule_list_for_flow
-- deploy's compatibility check and schedule plan (diff): every schedule of flow
-- %(flow_name)s with its stored input.
SELECT id, name, flow_name, cron, timezone, input, source, paused, next_run_at,
       last_run_at, last_run_id, revision
FROM {schema}.cyclone_schedules
WHERE flow_name = %(flow_name)s
ORDER BY name

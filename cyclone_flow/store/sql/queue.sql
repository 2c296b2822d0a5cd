-- name: run_insert_queued
-- Insert a new top run of a stored definition with its queue options (seeds: Unique Jobs,
-- Sequences) and the limits of the submitting client (Client Options: Limits and
-- Retention, WithMaxSignalWait): with a unique key the unique_slot (key, plus the window
-- bucket of the database's now()) conflicts with a run still holding it, and the insert
-- does nothing (the caller then reads the winner). The flow's deadline counts from the
-- run's start: run_at, or now() plus a delay in microseconds, or now().
INSERT INTO {schema}.cyclone_runs
    (workflow_id, flow_name, input, unique_key, unique_slot, unique_states,
     sequence_key, sequence_pos, sequence_held, schedule_id, scheduled_for,
     output_limit, max_signal_wait, deadline, deadline_at)
SELECT w.id, w.name, %(input)s::jsonb, %(unique_key)s::text,
    CASE WHEN %(unique_key)s::text IS NULL THEN NULL
         WHEN %(unique_window_s)s::float8 IS NULL THEN %(unique_key)s::text
         ELSE %(unique_key)s::text || '@'
              || floor(extract(epoch FROM now()) / %(unique_window_s)s::float8)::bigint::text
    END,
    coalesce(%(unique_states)s::text[], ARRAY['running']),
    %(sequence_key)s::text, %(sequence_pos)s::bigint, %(sequence_held)s::boolean,
    %(schedule_id)s::bigint, %(scheduled_for)s::timestamptz,
    %(output_limit)s::integer, make_interval(secs => %(max_signal_wait_s)s::float8),
    make_interval(secs => (w.plan->>'deadline_s')::float8),
    greatest(statement_timestamp(),
             coalesce(%(run_at)s::timestamptz,
                      statement_timestamp()
                          + (%(delay_us)s::bigint * interval '1 microsecond')))
        + make_interval(secs => (w.plan->>'deadline_s')::float8)
FROM {schema}.cyclone_workflows w
WHERE w.id = %(workflow_id)s
ON CONFLICT (unique_slot) WHERE unique_slot IS NOT NULL DO NOTHING
RETURNING id

-- name: run_get_unique_holder
-- The run that holds a unique key now (read after a conflicting insert; Unique Jobs).
SELECT id FROM {schema}.cyclone_runs
WHERE unique_slot = CASE WHEN %(unique_window_s)s::float8 IS NULL THEN %(unique_key)s::text
                         ELSE %(unique_key)s::text || '@'
                              || floor(extract(epoch FROM now())
                                       / %(unique_window_s)s::float8)::bigint::text
                    END

-- name: sequence_next_pos
-- Take the sequence's row lock for the rest of the transaction and hand out the next
-- position (submission order; Sequences).
INSERT INTO {schema}.cyclone_sequences AS q (key, last_pos)
VALUES (%(key)s, 1)
ON CONFLICT (key) DO UPDATE SET last_pos = q.last_pos + 1
RETURNING last_pos

-- name: sequence_has_open_run
-- Whether some run of the sequence is neither completed nor cancelled (a new run is then
-- held); read under the sequence's row lock.
SELECT EXISTS (
    SELECT 1 FROM {schema}.cyclone_runs
    WHERE sequence_key = %(key)s AND state NOT IN ('completed', 'cancelled'))

-- name: sequence_lock
-- Take the sequence's row lock (release of the next run after a run completed or was
-- cancelled; taken after the run row lock, like every path).
SELECT last_pos FROM {schema}.cyclone_sequences WHERE key = %(key)s FOR UPDATE

-- name: run_get_sequence
-- The sequence key of a run (NULL when it is in none).
SELECT sequence_key FROM {schema}.cyclone_runs WHERE id = %(run_id)s

-- name: sequence_release_next
-- The first run of the sequence that is neither completed nor cancelled, when it is held:
-- held -> released (its roots are then released as at submit, by step_release_ready in
-- the same transaction). A held run locked by another transaction (its own cancel) is
-- skipped: that transaction releases after it. Returns the released run.
WITH head AS (
    SELECT id FROM {schema}.cyclone_runs
    WHERE sequence_key = %(key)s AND state NOT IN ('completed', 'cancelled')
    ORDER BY sequence_pos
    LIMIT 1
), held AS (
    SELECT r.id FROM {schema}.cyclone_runs r
    WHERE r.id = (SELECT id FROM head) AND r.sequence_held AND r.state = 'running'
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {schema}.cyclone_runs r SET sequence_held = false
FROM held WHERE r.id = held.id AND r.sequence_held AND r.state = 'running'
RETURNING r.id

-- name: sequence_list_stalled
-- Maintenance safety net: sequences whose first open run is still held (its predecessor
-- finished but no release happened, e.g. the releasing transaction skipped it).
SELECT h.sequence_key
FROM (SELECT DISTINCT sequence_key FROM {schema}.cyclone_runs WHERE sequence_held) k
CROSS JOIN LATERAL (
    SELECT r.sequence_key, r.sequence_held FROM {schema}.cyclone_runs r
    WHERE r.sequence_key = k.sequence_key AND r.state NOT IN ('completed', 'cancelled')
    ORDER BY r.sequence_pos
    LIMIT 1) h
WHERE h.sequence_held
LIMIT %(batch)s

-- name: run_cancel_failed_in_sequence
-- failed -> cancelled for a run of a sequence (operator cancel): the runs behind it go on.
UPDATE {schema}.cyclone_runs
SET state = 'cancelled', finished_at = statement_timestamp(),
    error = %(error)s || ' (the run had failed: ' || coalesce(error, '') || ')',
    error_kind = 'cancelled'
WHERE id = %(run_id)s AND state = 'failed' AND sequence_key IS NOT NULL
RETURNING id

-- name: run_get_queue_info
-- The queue-feature columns of one run (status output).
SELECT unique_key, unique_slot IS NOT NULL AS unique_held, unique_states, sequence_key,
       sequence_pos, sequence_held, schedule_id, scheduled_for
FROM {schema}.cyclone_runs WHERE id = %(run_id)s

-- name: db_now
-- The database clock, or the instant a test pins (River: coalesce(@now, now())).
SELECT coalesce(%(now)s::timestamptz, now())

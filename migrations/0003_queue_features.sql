-- 0003_queue_features: unique runs, sequences and cron schedules (seeds: Queues and Priority,
-- Unique Jobs, Sequences, schedule options; Engine Design: Pool Budget names the schedule
-- scanner). Applied with search_path set to the target schema; every statement is safe to
-- apply twice.

-- Unique runs. unique_key is the key as given; unique_slot is what the unique index holds:
-- the key (plus the window bucket when a unique_window was given) while the run's state is
-- one of unique_states, NULL otherwise. A run leaving its covered states frees the key for
-- good (the trigger below clears the slot in the UPDATE that changes the state).
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS unique_key text;
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS unique_slot text;
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS unique_states text[] NOT NULL
    DEFAULT '{running}';

-- Sequences: runs sharing sequence_key execute one at a time in sequence_pos order. A run
-- with sequence_held keeps its root steps pending until every earlier run of its sequence
-- is completed or cancelled.
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS sequence_key text;
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS sequence_pos bigint;
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS sequence_held boolean NOT NULL DEFAULT false;

-- Cron schedules: the schedule and the tick a run was submitted for.
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS schedule_id bigint;
ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS scheduled_for timestamptz;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'cyclone_runs'::regclass
                   AND conname = 'cyclone_runs_unique_slot_check') THEN
        -- a run holds its unique key only in a covered state
        ALTER TABLE cyclone_runs ADD CONSTRAINT cyclone_runs_unique_slot_check
            CHECK (unique_slot IS NULL OR (unique_key IS NOT NULL AND state = ANY (unique_states)));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'cyclone_runs'::regclass
                   AND conname = 'cyclone_runs_unique_states_check') THEN
        ALTER TABLE cyclone_runs ADD CONSTRAINT cyclone_runs_unique_states_check
            CHECK (unique_states <@ ARRAY['running', 'completed', 'failed', 'cancelled']);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'cyclone_runs'::regclass
                   AND conname = 'cyclone_runs_sequence_check') THEN
        -- a sequence position exactly when a sequence key; only a running run is held
        ALTER TABLE cyclone_runs ADD CONSTRAINT cyclone_runs_sequence_check
            CHECK ((sequence_key IS NULL) = (sequence_pos IS NULL)
                   AND (NOT sequence_held OR (sequence_key IS NOT NULL AND state = 'running')));
    END IF;
END
$$;

-- the unique index that makes a duplicate submission a conflict, race-free
CREATE UNIQUE INDEX IF NOT EXISTS cyclone_runs_unique_slot_key
    ON cyclone_runs (unique_slot) WHERE unique_slot IS NOT NULL;

-- "the runs of sequence K in order" (hold at submit, release of the next run)
CREATE INDEX IF NOT EXISTS cyclone_runs_sequence_idx
    ON cyclone_runs (sequence_key, sequence_pos) WHERE sequence_key IS NOT NULL;

-- the safety net of the maintenance loop: held runs only
CREATE INDEX IF NOT EXISTS cyclone_runs_sequence_held_idx
    ON cyclone_runs (sequence_key, sequence_pos) WHERE sequence_held;

-- one run per schedule tick, whatever the scanners do
CREATE UNIQUE INDEX IF NOT EXISTS cyclone_runs_schedule_tick_key
    ON cyclone_runs (schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL;

-- In the very UPDATE that changes a run's state (every run transition: completion, failure,
-- cancel, retry, and any added later): clear unique_slot when the new state is not one its
-- unique key covers, and sequence_held when the run is no longer running (a held run that
-- is cancelled).
CREATE OR REPLACE FUNCTION cyclone_runs_state_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.state = ANY (NEW.unique_states)) THEN
        NEW.unique_slot := NULL;
    END IF;
    IF NEW.state <> 'running' THEN
        NEW.sequence_held := false;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS cyclone_runs_state_change ON cyclone_runs;
CREATE TRIGGER cyclone_runs_state_change
    BEFORE UPDATE OF state ON cyclone_runs
    FOR EACH ROW
    WHEN ((NEW.unique_slot IS NOT NULL OR NEW.sequence_held)
          AND NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION cyclone_runs_state_change();

-- One row per sequence key: its row lock serialises the submits and releases of that
-- sequence, and last_pos hands out positions in submission order.
CREATE TABLE IF NOT EXISTS cyclone_sequences (
    key       text   PRIMARY KEY,
    last_pos  bigint NOT NULL DEFAULT 0
);

-- Cron schedules. name identifies a schedule; source 'flow' ones are declared in a flow file
-- and managed by `schedule sync`, 'manual' ones by `schedule add/remove`. next_run_at is the
-- next tick (UTC instant); the scanner moves it forward with a compare-and-swap in the
-- transaction that inserts the tick's run.
CREATE TABLE IF NOT EXISTS cyclone_schedules (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL,
    flow_name    text        NOT NULL,
    workflow_id  bigint      NOT NULL REFERENCES cyclone_workflows (id),
    cron         text        NOT NULL,
    timezone     text        NOT NULL DEFAULT 'UTC',
    input        jsonb       NOT NULL DEFAULT 'null',
    source       text        NOT NULL DEFAULT 'manual',
    paused       boolean     NOT NULL DEFAULT false,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_run_id  uuid,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cyclone_schedules_name_key UNIQUE (name),
    CONSTRAINT cyclone_schedules_source_check CHECK (source IN ('flow', 'manual'))
);

-- serves the scanner: due, unpaused schedules
CREATE INDEX IF NOT EXISTS cyclone_schedules_due_idx
    ON cyclone_schedules (next_run_at) WHERE NOT paused;

-- 0015_import_wait: a step that a worker could not import (or may not run: outside its
-- --allow-module) is given back instead of failed (issue 30.2, docs/failures.md):
-- import_wait_since is when it was first given back (the database's clock; the node's
-- import_wait counts from it, then the step is discarded with error_kind import_error),
-- import_wait_reason the last worker's account of why ("no live worker can import
-- shop.handlers:charge: worker w1: ModuleNotFoundError: ..."), shown by status, explain
-- and the dashboard while the step waits. Both NULL for a step nobody gave back, and
-- cleared when an attempt of it runs to a failure or when an operator retry resets it.
-- Nullable without a default: adding them rewrites nothing. Applied with search_path set
-- to the target schema; safe to apply twice.

ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS import_wait_since timestamptz;
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS import_wait_reason text;

-- Why a never-claimed step of a call that was given back elsewhere waits
-- (step_list_given_back_calls, status only): a partial index of the given-back steps
-- alone (few rows; empty while every worker can import its calls), so that read never
-- walks a queue's backlog.
CREATE INDEX IF NOT EXISTS cyclone_steps_given_back_idx
    ON cyclone_steps (call, queue, scheduled_at) WHERE import_wait_reason IS NOT NULL;

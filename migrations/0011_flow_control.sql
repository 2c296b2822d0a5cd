-- 0011_flow_control: concurrency limits per key and rate limits (issue 20, docs/flow-control.md).
-- A step of a node with `concurrency:` carries its rendered key and limit
-- (concurrency_key, concurrency_limit); one with `rate_limit:` its key, limit and window
-- (rate_key, rate_limit, rate_per). Such a step (a "limited" step) is inserted with
-- claim_owner '~limits', so the workers' generic claim (claim_owner '' only) never takes
-- it and keeps its statement and plan; step_claim_limited_if_available claims limited
-- steps, serialized per schema by an advisory lock, counting the running steps of each
-- concurrency key from cyclone_steps itself (the count is derived from running rows: a
-- finished, failed, cancelled or reclaimed step frees its slot in the transaction that
-- moved it, and there is no counter to drift) and the claims of each rate key in the
-- current window of cyclone_rate_windows. Applied with search_path set to the target
-- schema; safe to apply twice.

ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS concurrency_key text;
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS concurrency_limit integer;
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS rate_key text;
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS rate_limit integer;
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS rate_per interval;
-- a limited step whose key refers to an upstream output: the plan's limits, rendered into
-- the columns above by the first limited claim that finds the step available (its
-- ancestors have completed by then); NULL for every other step
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS limit_plan jsonb;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'cyclone_steps_concurrency_check'
                     AND conrelid = to_regclass('cyclone_steps')) THEN
        ALTER TABLE cyclone_steps ADD CONSTRAINT cyclone_steps_concurrency_check CHECK
            ((concurrency_key IS NULL) = (concurrency_limit IS NULL)
             AND coalesce(concurrency_limit, 1) >= 1);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'cyclone_steps_rate_check'
                     AND conrelid = to_regclass('cyclone_steps')) THEN
        ALTER TABLE cyclone_steps ADD CONSTRAINT cyclone_steps_rate_check CHECK
            ((rate_key IS NULL) = (rate_limit IS NULL) AND (rate_key IS NULL) = (rate_per IS NULL)
             AND coalesce(rate_limit, 1) >= 1 AND coalesce(rate_per, interval '1 s') > interval '0');
    END IF;
END $$;

-- the limited claim: the available limited steps of a queue by key (coalesce(concurrency_key,
-- rate_key), in byte order: COLLATE "C") in claim order; walked key by key (a loose index
-- scan), each key's head read with its LIMIT. Holds no row of a step without limits.
CREATE INDEX IF NOT EXISTS cyclone_steps_limited_idx
    ON cyclone_steps (queue, (coalesce(concurrency_key, rate_key) COLLATE "C"), priority,
                      scheduled_at, id)
    WHERE state = 'available' AND claim_owner = '~limits';

-- the running steps of a concurrency key: the slots taken (at most its limit entries read)
CREATE INDEX IF NOT EXISTS cyclone_steps_concurrency_running_idx
    ON cyclone_steps (concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;

-- the limited steps whose keys are not rendered yet (none unless a key refers to an output)
CREATE INDEX IF NOT EXISTS cyclone_steps_limits_unrendered_idx
    ON cyclone_steps (queue)
    WHERE state = 'available' AND claim_owner = '~limits' AND limit_plan IS NOT NULL
      AND concurrency_key IS NULL AND rate_key IS NULL;

-- the owner release reads the owned rows only: limited steps ('~limits') are nobody's
DO $$
BEGIN
    IF coalesce(pg_get_indexdef(to_regclass('cyclone_steps_owned_idx')), '')
           NOT LIKE '%~limits%' THEN
        DROP INDEX IF EXISTS cyclone_steps_owned_idx;
        CREATE INDEX cyclone_steps_owned_idx
            ON cyclone_steps (claim_owner)
            WHERE claim_owner IS NOT NULL AND claim_owner <> '~limits';
    END IF;
END $$;

-- one row per rate key: the claims counted in its current window, which starts at
-- window_start (date_bin(rate_per, now, epoch): fixed windows of the database clock)
CREATE TABLE IF NOT EXISTS cyclone_rate_windows (
    rate_key     text        PRIMARY KEY,
    window_start timestamptz NOT NULL,
    claims       integer     NOT NULL,
    CONSTRAINT cyclone_rate_windows_claims_check CHECK (claims >= 0)
);

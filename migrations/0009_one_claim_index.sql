-- 0009_one_claim_index: one index for every claim instead of two. 0007 added
-- cyclone_steps_claim_shared_idx (the available steps nobody owns) beside
-- cyclone_steps_claim_idx (every available step): each step that became available was
-- written to both, and that second entry per state change showed in the fan-out and
-- bulk-submit figures. cyclone_steps_claim_idx now keys the owner after the queue, as
-- coalesce(claim_owner, '') (client ids are never empty: '' is nobody), so that
--   the workers' claim (queue = Q AND coalesce(claim_owner, '') = '') and
--   an isolated run's own claim (queue = Q AND coalesce(claim_owner, '') = OWNER)
-- each walk one range of it in (priority, scheduled_at, id) order and stop after their
-- LIMIT, and the per-queue counts read it by its queue prefix. Applied with search_path
-- set to the target schema; safe to apply twice (the index is rebuilt only when it still
-- has 0001's definition).

DROP INDEX IF EXISTS cyclone_steps_claim_shared_idx;

DO $$
BEGIN
    -- the index of this schema only (search_path), read without a catalog scan
    IF coalesce(pg_get_indexdef(to_regclass('cyclone_steps_claim_idx')), '')
           NOT LIKE '%COALESCE(claim_owner%' THEN
        DROP INDEX IF EXISTS cyclone_steps_claim_idx;
        CREATE INDEX cyclone_steps_claim_idx
            ON cyclone_steps (queue, (coalesce(claim_owner, '')), priority, scheduled_at, id)
            WHERE state = 'available';
    END IF;
END $$;

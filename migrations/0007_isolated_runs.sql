-- 0007_isolated_runs: a run owned by the `cyclone-flow run` process that submitted it
-- (issue 18: isolated runs). cyclone_runs.owner is the client id of that process on a top
-- run (NULL: shared, claimed by any worker of its queues); every step of the run and of
-- its child runs copies it into claim_owner when inserted. The generic claim takes only
-- steps without a claim_owner (cyclone_steps_claim_shared_idx); the owner claims its own
-- run's steps. When the owner's cyclone_workers row is gone or not heartbeated for one
-- lease_ttl, the owner release of any started client clears owner and claim_owner: the
-- run is released to the workers. Applied with search_path set to the target schema;
-- safe to apply twice.

ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS owner text;
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS claim_owner text;

-- the generic claim: available rows nobody owns, in claim order (the owner's own claim
-- and the counts keep cyclone_steps_claim_idx)
CREATE INDEX IF NOT EXISTS cyclone_steps_claim_shared_idx
    ON cyclone_steps (queue, priority, scheduled_at, id)
    WHERE state = 'available' AND claim_owner IS NULL;

-- the owner release: the owned rows only (none while nobody uses `cyclone-flow run`)
CREATE INDEX IF NOT EXISTS cyclone_steps_owned_idx
    ON cyclone_steps (claim_owner) WHERE claim_owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS cyclone_runs_owned_idx
    ON cyclone_runs (owner) WHERE owner IS NOT NULL;

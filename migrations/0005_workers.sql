-- 0005_workers: one heartbeat row per started client (issue 18: live workers). The worker's
-- heartbeat upserts its row every lease_ttl / 3 seconds and a clean shutdown deletes it;
-- a row not heartbeated for one lease_ttl is a dead worker's (shown as dead by
-- `cyclone-flow workers`), and the worker reaper deletes it after 10 x its lease_ttl.
-- Applied with search_path set to the target schema; safe to apply twice.

CREATE TABLE IF NOT EXISTS cyclone_workers (
    client_id    text        PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    -- the queues it claims from, and the worker threads of each (same order)
    queues       text[]      NOT NULL,
    slots        integer[]   NOT NULL,
    -- a `cyclone-flow run` process claims only the steps of its own run
    only_run     uuid,
    lease_ttl    interval    NOT NULL,
    version      text        NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cyclone_workers_queues_check
        CHECK (cardinality(queues) = cardinality(slots))
);

-- the reaper's scan and the queue look-up of "why is it waiting"
CREATE INDEX IF NOT EXISTS cyclone_workers_heartbeat_idx ON cyclone_workers (heartbeat_at);

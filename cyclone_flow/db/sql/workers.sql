-- Table cyclone_workers: one heartbeat row per started client, upserted by its heartbeat
-- and deleted at its clean shutdown; a row not heartbeated for one lease_ttl is a dead
-- worker's, deleted by the worker reaper after 10 x lease_ttl. Defined by migration
-- 0005_workers.

-- name: worker_upsert
-- A started client's heartbeat row: written at start and at every beat (heartbeat_at from
-- the database clock; started_at kept from the first write).
INSERT INTO {schema}.cyclone_workers AS w
    (client_id, hostname, pid, queues, slots, only_run, lease_ttl, version)
VALUES (%(client_id)s, %(hostname)s, %(pid)s, %(queues)s::text[], %(slots)s::int[],
        %(only_run)s::uuid, %(lease_ttl_s)s * interval '1 second', %(version)s)
ON CONFLICT (client_id) DO UPDATE
SET hostname = excluded.hostname, pid = excluded.pid, queues = excluded.queues,
    slots = excluded.slots, only_run = excluded.only_run, lease_ttl = excluded.lease_ttl,
    version = excluded.version, heartbeat_at = now()

-- name: worker_delete
-- A clean shutdown removes its client's row.
DELETE FROM {schema}.cyclone_workers WHERE client_id = %(client_id)s

-- name: worker_delete_if_stale
-- The worker reaper: delete the rows not heartbeated for %(factor)s x their lease_ttl
-- before now (the database clock, or a pinned instant); returns their client ids.
DELETE FROM {schema}.cyclone_workers
WHERE heartbeat_at < coalesce(%(now)s::timestamptz, now()) - %(factor)s::float8 * lease_ttl
RETURNING client_id

-- name: worker_list
-- Every heartbeat row with its liveness at now (a beat within one lease_ttl: three
-- beats missed make a worker dead), live ones first, then by client id.
SELECT w.client_id, w.hostname, w.pid, w.queues, w.slots, w.only_run::text AS only_run,
       extract(epoch FROM w.lease_ttl)::float8 AS lease_ttl_s, w.version, w.started_at,
       w.heartbeat_at, w.heartbeat_at >= t.now - w.lease_ttl AS live,
       greatest(extract(epoch FROM t.now - w.heartbeat_at), 0)::float8 AS last_seen_s
FROM {schema}.cyclone_workers w
CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, now()) AS now) t
ORDER BY (w.heartbeat_at >= t.now - w.lease_ttl) DESC, w.client_id

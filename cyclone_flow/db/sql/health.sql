-- No table of its own: the health advisor's reads (`cyclone-flow doctor`, the worker's
-- health gauges, the dashboard's health page; docs/observability.md) of Postgres's
-- statistics and catalogs about the engine's tables (cyclone_steps, cyclone_runs of
-- migration 0001_initial, cyclone_workers of 0005_workers), and of the sessions,
-- replication slots and prepared transactions that hold the xmin horizon back. Every
-- statement only reads; none locks an engine row.

-- name: health_list_tables
-- Vacuum state of the two hot tables of %(schema)s: live and dead tuples (the statistics'
-- estimates), the last (auto)vacuum and (auto)analyze, whether autovacuum may run on them
-- (the server setting and the table's autovacuum_enabled option), their size and options.
SELECT c.relname AS table_name,
       coalesce(s.n_live_tup, 0)::bigint AS live,
       coalesce(s.n_dead_tup, 0)::bigint AS dead,
       s.last_autovacuum, s.last_vacuum, s.last_autoanalyze, s.last_analyze,
       coalesce(s.autovacuum_count, 0)::bigint AS autovacuum_count,
       current_setting('autovacuum')::boolean
           AND NOT EXISTS (
               SELECT 1 FROM pg_options_to_table(c.reloptions) o
               WHERE o.option_name = 'autovacuum_enabled'
                 AND lower(o.option_value) IN ('false', 'off', 'no', '0', 'f', 'n')
           ) AS autovacuum_enabled,
       pg_total_relation_size(c.oid)::bigint AS total_bytes,
       coalesce(array_to_string(c.reloptions, ', '), '') AS options
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = %(schema)s AND c.relname IN ('cyclone_steps', 'cyclone_runs')
  AND c.relkind = 'r'
ORDER BY c.relname

-- name: health_list_open_transactions
-- The transactions of this database (and of walsenders, whose feedback holds the horizon
-- too) open for at least %(min_age_s)s seconds, oldest first (at most %(limit)s), but this
-- session's: pid, who, what state, since when, and whether it holds the xmin horizon back
-- (a snapshot or a transaction id: then vacuum cannot remove what died after it began).
SELECT a.pid, a.datname, a.usename, a.application_name, a.client_addr::text AS client_addr,
       a.state, a.backend_type, a.xact_start, a.query_start,
       greatest(extract(epoch FROM now() - a.xact_start), 0)::float8 AS age_s,
       (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL) AS holds_xmin,
       coalesce(greatest(age(a.backend_xmin), age(a.backend_xid)), 0)::bigint AS xmin_age,
       left(coalesce(a.query, ''), 200) AS query
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
  AND (a.datname = current_database() OR a.datname IS NULL)
  AND a.xact_start <= now() - make_interval(secs => %(min_age_s)s::float8)
ORDER BY a.xact_start
LIMIT %(limit)s

-- name: health_get_oldest_xmin_holder
-- The oldest transaction of this database (or walsender) that holds the xmin horizon back
-- (a snapshot or a transaction id), however young, but this session's: reported always,
-- warned about only past the age threshold (health_list_open_transactions).
SELECT a.pid, a.datname, a.usename, a.application_name, a.client_addr::text AS client_addr,
       a.state, a.backend_type, a.xact_start, a.query_start,
       greatest(extract(epoch FROM now() - a.xact_start), 0)::float8 AS age_s,
       true AS holds_xmin,
       coalesce(greatest(age(a.backend_xmin), age(a.backend_xid)), 0)::bigint AS xmin_age,
       left(coalesce(a.query, ''), 200) AS query
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
  AND (a.datname = current_database() OR a.datname IS NULL)
  AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
ORDER BY a.xact_start
LIMIT 1

-- name: health_list_xmin_slots
-- Replication slots and prepared transactions that hold the xmin horizon back (a slot's
-- xmin from hot_standby_feedback, a prepared transaction's xid), oldest first: vacuum of
-- every table waits for them too.
SELECT 'slot' AS kind, r.slot_name AS name, r.active, age(r.xmin)::bigint AS xmin_age,
       NULL::float8 AS age_s
FROM pg_replication_slots r
WHERE r.xmin IS NOT NULL
UNION ALL
SELECT 'prepared', p.gid, false, age(p.transaction)::bigint,
       greatest(extract(epoch FROM now() - p.prepared), 0)::float8
FROM pg_prepared_xacts p
WHERE p.database = current_database()
ORDER BY xmin_age DESC

-- name: health_get_claim_index
-- The claim index of %(schema)s (cyclone_steps_claim_idx, migration 0009_one_claim_index):
-- its size in bytes and pages, and the entries the last vacuum or analyze counted
-- (reltuples, -1: never counted): what the bloat estimate compares.
SELECT pg_relation_size(c.oid)::bigint AS bytes, c.relpages::bigint AS pages,
       c.reltuples::float8 AS entries
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = 'cyclone_steps_claim_idx'

-- name: health_explain_claim_read
-- How the claim's read runs now on the real table, measured: the claimable steps of
-- %(queue)s as step_claim_if_available selects them (without FOR UPDATE: nothing is locked
-- or written), executed by EXPLAIN ANALYZE with its buffers (JSON). Dead index entries at
-- the head of the claim order show here as buffers read for few rows.
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id
FROM {schema}.cyclone_steps
WHERE state = 'available' AND coalesce(claim_owner, '') = '' AND queue = %(queue)s
  AND scheduled_at <= now()
ORDER BY priority, scheduled_at, id
LIMIT %(limit)s

-- name: health_list_orphaned_leases
-- Running steps leased by a client whose heartbeat row is gone or older than its lease_ttl
-- (a dead worker), per lease owner: how many, the latest lease expiry (the recovery sweep
-- reclaims them after it) and when the owner last beat (NULL: no row).
SELECT s.lease_owner, count(*)::bigint AS steps, max(s.lease_expiry) AS lease_expiry,
       w.heartbeat_at
FROM {schema}.cyclone_steps s
LEFT JOIN {schema}.cyclone_workers w ON w.client_id = s.lease_owner
WHERE s.state = 'running' AND s.lease_owner IS NOT NULL
  AND (w.client_id IS NULL OR w.heartbeat_at < now() - w.lease_ttl)
GROUP BY s.lease_owner, w.heartbeat_at
ORDER BY count(*) DESC, s.lease_owner
LIMIT %(limit)s

-- name: health_list_held_sequences
-- Sequences with held runs (at most %(limit)s, most held first): how many runs wait, for
-- how long the oldest has waited, and the first open run that holds them (its id and
-- state: failed means the sequence is blocked until it is retried or cancelled).
SELECT k.sequence_key, k.held, k.oldest_held_s, h.id::text AS head_run_id,
       h.state AS head_state
FROM (SELECT sequence_key, count(*)::bigint AS held,
             greatest(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_held_s
      FROM {schema}.cyclone_runs
      WHERE sequence_held
      GROUP BY sequence_key) k
LEFT JOIN LATERAL (
    SELECT r.id, r.state FROM {schema}.cyclone_runs r
    WHERE r.sequence_key = k.sequence_key AND NOT r.sequence_held
      AND r.state NOT IN ('completed', 'cancelled')
    ORDER BY r.sequence_pos
    LIMIT 1) h ON true
ORDER BY k.held DESC, k.sequence_key
LIMIT %(limit)s

-- name: health_get_connections
-- The server's connection budget (max_connections less the reserved ones), the client
-- connections open now, and the live workers of %(schema)s (a heartbeat within one
-- lease_ttl) with the worker threads they run.
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
           AS in_use,
       (SELECT count(*) FROM {schema}.cyclone_workers w
        WHERE w.heartbeat_at >= now() - w.lease_ttl)::int AS live_workers,
       (SELECT coalesce(sum(x), 0) FROM {schema}.cyclone_workers w, unnest(w.slots) x
        WHERE w.heartbeat_at >= now() - w.lease_ttl)::int AS worker_threads

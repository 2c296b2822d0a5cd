-- Table cyclone_steps: one row per node of a run (and per item of a started fan-out node),
-- with its state, lease, attempts, output and error history. Defined by migrations
-- 0001_initial, 0002_node_types (node types: fan-out items and counts, child runs,
-- signals, wait_until), 0010_when_and_rerun (when: condition, on_dep_skip, skip_reason,
-- the skipped state, reused_from) and 0011_flow_control (a limited step's keys and
-- limits). Every transition is a compare-and-swap guarded by the state (and, for a leased
-- step, by lease_owner and lease_generation); zero rows is a stale result,
-- never an error (Engine Design: CAS State Transitions). Nodes that wait without a worker
-- (child and wait_signal nodes, fan-out nodes while their items run) sit in state
-- waiting, never claimed; the engine completes or discards them in the transaction of the
-- event that decides them, under the run row lock.

-- name: step_cancel_items_if_unfinished
-- Every unfinished item of a fan-out node -> cancelled (the node was discarded or
-- cancelled); a running item learns it on its next heartbeat.
UPDATE {schema}.cyclone_steps
SET state = 'cancelled', finished_at = statement_timestamp(), lease_expiry = NULL,
    error = %(error)s, error_kind = 'cancelled'
WHERE run_id = %(run_id)s AND parent_node = %(node)s
  AND state NOT IN ('completed', 'discarded', 'cancelled', 'skipped')
RETURNING node

-- name: step_cancel_nodes_if_unfinished
-- The named non-terminal steps of a run -> cancelled (a contained branch: cancel_branch).
UPDATE {schema}.cyclone_steps
SET state = 'cancelled', finished_at = statement_timestamp(), lease_expiry = NULL,
    error = %(error)s, error_kind = 'cancelled'
WHERE run_id = %(run_id)s AND node = ANY(%(nodes)s::text[])
  AND state NOT IN ('completed', 'discarded', 'cancelled', 'skipped')
RETURNING node

-- name: step_cancel_if_unfinished
-- Every non-terminal step of a failed or cancelled run -> cancelled (a second UPDATE in the
-- discarding transaction; Engine Design: Failure Propagation).
UPDATE {schema}.cyclone_steps
SET state = 'cancelled', finished_at = statement_timestamp(), lease_expiry = NULL,
    error = %(error)s, error_kind = 'cancelled'
WHERE run_id = %(run_id)s AND state NOT IN ('completed', 'discarded', 'cancelled', 'skipped')
RETURNING node

-- name: step_claim_if_available
-- available -> running for up to %(limit)s steps of one queue: SKIP LOCKED, then the CAS
-- that takes the lease with the database's now() and a TTL in microseconds (Engine Design:
-- The Claiming Algorithm, CAS State Transitions). queue = %(queue)s (one queue per
-- statement) and coalesce(claim_owner, '') = '' (the steps nobody owns: an isolated run's
-- are its `cyclone-flow run` process's) let Postgres walk one range of
-- cyclone_steps_claim_idx in (priority, scheduled_at, id) order and stop after %(limit)s
-- rows instead of sorting the queue's backlog. run_input is the run's input as JSON text
-- when the node may need it (no input template and not a fan-out item, or a template that
-- mentions run.input), else NULL: a prefetch that spares the worker a separate read
-- (Output Resolution). traceparent is the submitter's trace context copied onto the step
-- (migration 0012); only for a traced step the run's flow name is read (its span's name).
WITH claimable AS (
    SELECT id
    FROM {schema}.cyclone_steps
    WHERE state = 'available' AND coalesce(claim_owner, '') = '' AND queue = %(queue)s
      AND scheduled_at <= now()
    ORDER BY priority, scheduled_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.cyclone_steps s
SET state = 'running',
    lease_owner = %(owner)s,
    lease_expiry = now() + (%(ttl_us)s::bigint * interval '1 microsecond'),
    heartbeat_at = now(),
    started_at = now(),
    lease_generation = s.lease_generation + 1
FROM claimable c
WHERE s.id = c.id AND s.state = 'available'
RETURNING s.id, s.run_id, s.node, s.type, s.call, s.queue, s.attempt, s.max_attempts,
          s.reclaims, s.lease_generation, s.input,
          extract(epoch FROM s.timeout)::float8 AS timeout_s,
          greatest(extract(epoch FROM now() - s.scheduled_at), 0)::float8 AS wait_s,
          s.parent_node, s.item_index, s.item,
          CASE WHEN (s.input IS NULL AND s.parent_node IS NULL)
                    OR strpos(s.input::text, 'run.input') > 0
               THEN (SELECT r.input::text FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS run_input,
          s.traceparent,
          CASE WHEN s.traceparent IS NOT NULL
               THEN (SELECT r.flow_name FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS flow_name

-- name: step_claim_in_run_if_available
-- step_claim_if_available restricted to one run and its child runs (cyclone-flow run's
-- %(run_id)s), owned by the claiming process or not: a statement of its own so the generic
-- plan of step_claim_if_available never carries the run filter. Not the limited steps
-- ('~limits': step_claim_limited_if_available takes them).
WITH claimable AS (
    SELECT id
    FROM {schema}.cyclone_steps
    WHERE state = 'available' AND queue = %(queue)s AND scheduled_at <= now()
      AND coalesce(root_run_id, run_id) = %(run_id)s::uuid
      AND coalesce(claim_owner, '') <> '~limits'
    ORDER BY priority, scheduled_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.cyclone_steps s
SET state = 'running',
    lease_owner = %(owner)s,
    lease_expiry = now() + (%(ttl_us)s::bigint * interval '1 microsecond'),
    heartbeat_at = now(),
    started_at = now(),
    lease_generation = s.lease_generation + 1
FROM claimable c
WHERE s.id = c.id AND s.state = 'available'
RETURNING s.id, s.run_id, s.node, s.type, s.call, s.queue, s.attempt, s.max_attempts,
          s.reclaims, s.lease_generation, s.input,
          extract(epoch FROM s.timeout)::float8 AS timeout_s,
          greatest(extract(epoch FROM now() - s.scheduled_at), 0)::float8 AS wait_s,
          s.parent_node, s.item_index, s.item,
          CASE WHEN (s.input IS NULL AND s.parent_node IS NULL)
                    OR strpos(s.input::text, 'run.input') > 0
               THEN (SELECT r.input::text FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS run_input,
          s.traceparent,
          CASE WHEN s.traceparent IS NOT NULL
               THEN (SELECT r.flow_name FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS flow_name

-- name: step_claim_other_calls_if_available
-- step_claim_if_available without the steps whose call is in %(skip_calls)s: the calls this
-- worker gave back lately because it cannot import them (issue 30.2,
-- step_give_back_if_leased), left to other workers. A statement of its own, run only
-- while the worker has such calls: the filter on a parameter array would change the
-- generic plan of the usual claim (a bitmap scan and a sort of the queue's backlog
-- instead of the claim index in order).
WITH claimable AS (
    SELECT id
    FROM {schema}.cyclone_steps
    WHERE state = 'available' AND coalesce(claim_owner, '') = '' AND queue = %(queue)s
      AND scheduled_at <= now() AND coalesce(call, '') <> ALL(%(skip_calls)s::text[])
    ORDER BY priority, scheduled_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.cyclone_steps s
SET state = 'running',
    lease_owner = %(owner)s,
    lease_expiry = now() + (%(ttl_us)s::bigint * interval '1 microsecond'),
    heartbeat_at = now(),
    started_at = now(),
    lease_generation = s.lease_generation + 1
FROM claimable c
WHERE s.id = c.id AND s.state = 'available'
RETURNING s.id, s.run_id, s.node, s.type, s.call, s.queue, s.attempt, s.max_attempts,
          s.reclaims, s.lease_generation, s.input,
          extract(epoch FROM s.timeout)::float8 AS timeout_s,
          greatest(extract(epoch FROM now() - s.scheduled_at), 0)::float8 AS wait_s,
          s.parent_node, s.item_index, s.item,
          CASE WHEN (s.input IS NULL AND s.parent_node IS NULL)
                    OR strpos(s.input::text, 'run.input') > 0
               THEN (SELECT r.input::text FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS run_input,
          s.traceparent,
          CASE WHEN s.traceparent IS NOT NULL
               THEN (SELECT r.flow_name FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
          END AS flow_name

-- name: step_claim_limited_if_available
-- available -> running for up to %(limit)s limited steps of one queue (claim_owner
-- '~limits': nodes with concurrency: or rate_limit:, docs/flow-control.md), each key within
-- its limit: a concurrency key at most concurrency_limit minus its running steps (counted
-- from the running rows through cyclone_steps_concurrency_running_idx: a step that leaves
-- running frees its slot in that transaction), a rate key at most rate_limit minus its
-- claims of the last rate_per (the sliding log of cyclone_rate_windows, by the database
-- clock: the buckets that end after now - rate_per; this statement adds its claims there
-- with cyclone_rate_log_next, migration 0014). The keys that have available limited steps
-- are walked one by one (a loose index scan of cyclone_steps_limited_idx) from the first
-- key after %(cursor)s, wrapping around (round robin: a key at its limit is skipped, a
-- hot key never holds back the keys after it), each key's heads read in (priority,
-- scheduled_at, id) order up to the room it has; the walk stops at %(limit)s steps. Run after step_begin_limited_claim in the same
-- transaction: this statement's snapshot then holds every limited claim committed before
-- it. statement_timestamp() throughout (the transaction began before the lock wait).
-- %(run_id)s: only that run and its child runs (cyclone-flow run), or NULL. Returns the
-- columns of step_claim_if_available and each step's walk key (limit_key).
WITH RECURSIVE after_cursor(k) AS (
    (SELECT (coalesce(concurrency_key, rate_key) COLLATE "C") FROM {schema}.cyclone_steps
     WHERE state = 'available' AND claim_owner = '~limits' AND queue = %(queue)s
       AND (coalesce(concurrency_key, rate_key) COLLATE "C") > %(cursor)s::text
     ORDER BY (coalesce(concurrency_key, rate_key) COLLATE "C")
     LIMIT 1)
    UNION ALL
    SELECT (SELECT (coalesce(s.concurrency_key, s.rate_key) COLLATE "C") FROM {schema}.cyclone_steps s
            WHERE s.state = 'available' AND s.claim_owner = '~limits' AND s.queue = %(queue)s
              AND (coalesce(s.concurrency_key, s.rate_key) COLLATE "C") > a.k
            ORDER BY (coalesce(s.concurrency_key, s.rate_key) COLLATE "C")
            LIMIT 1)
    FROM after_cursor a
    WHERE a.k IS NOT NULL
), upto_cursor(k) AS (
    (SELECT (coalesce(concurrency_key, rate_key) COLLATE "C") FROM {schema}.cyclone_steps
     WHERE state = 'available' AND claim_owner = '~limits' AND queue = %(queue)s
       AND (coalesce(concurrency_key, rate_key) COLLATE "C") <= %(cursor)s::text
     ORDER BY (coalesce(concurrency_key, rate_key) COLLATE "C")
     LIMIT 1)
    UNION ALL
    SELECT (SELECT (coalesce(s.concurrency_key, s.rate_key) COLLATE "C") FROM {schema}.cyclone_steps s
            WHERE s.state = 'available' AND s.claim_owner = '~limits' AND s.queue = %(queue)s
              AND (coalesce(s.concurrency_key, s.rate_key) COLLATE "C") > u.k
              AND (coalesce(s.concurrency_key, s.rate_key) COLLATE "C") <= %(cursor)s::text
            ORDER BY (coalesce(s.concurrency_key, s.rate_key) COLLATE "C")
            LIMIT 1)
    FROM upto_cursor u
    WHERE u.k IS NOT NULL
), walk AS (
    SELECT k FROM after_cursor WHERE k IS NOT NULL
    UNION ALL
    SELECT k FROM upto_cursor WHERE k IS NOT NULL
), candidates AS (
    SELECT c.id, c.state, h.rate_key, room.rate_room, w.k
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT h.concurrency_key, h.concurrency_limit, h.rate_key, h.rate_limit, h.rate_per
        FROM {schema}.cyclone_steps h
        WHERE h.state = 'available' AND h.claim_owner = '~limits' AND h.queue = %(queue)s
          AND (coalesce(h.concurrency_key, h.rate_key) COLLATE "C") = w.k
          AND h.scheduled_at <= statement_timestamp()
          AND (%(run_id)s::uuid IS NULL OR coalesce(h.root_run_id, h.run_id) = %(run_id)s::uuid)
        ORDER BY h.priority, h.scheduled_at, h.id
        LIMIT 1) h
    CROSS JOIN LATERAL (
        SELECT CASE WHEN h.concurrency_key IS NULL THEN %(limit)s::bigint
                    ELSE h.concurrency_limit - (
                        SELECT count(*) FROM {schema}.cyclone_steps r
                        WHERE r.state = 'running' AND r.concurrency_key = h.concurrency_key)
               END AS slots,
               CASE WHEN h.rate_key IS NULL THEN %(limit)s::bigint
                    ELSE h.rate_limit - coalesce((
                        SELECT sum(u.c) FROM {schema}.cyclone_rate_windows rw
                        CROSS JOIN LATERAL unnest(rw.bucket_ends, rw.bucket_claims) AS u(e, c)
                        WHERE rw.rate_key = h.rate_key
                          AND u.e > statement_timestamp() - h.rate_per), 0)
               END AS rate_room
        OFFSET 0) room  -- once per key: not folded into each candidate row
    CROSS JOIN LATERAL (
        SELECT s.id, s.state
        FROM {schema}.cyclone_steps s
        WHERE s.state = 'available' AND s.claim_owner = '~limits' AND s.queue = %(queue)s
          AND (coalesce(s.concurrency_key, s.rate_key) COLLATE "C") = w.k
          -- only the steps under the head's own keys: the room was counted for them (a
          -- walk key also holds steps whose other key differs, or a rate key named as
          -- another node's concurrency key); the others wait to be a head themselves
          AND s.concurrency_key IS NOT DISTINCT FROM h.concurrency_key
          AND s.rate_key IS NOT DISTINCT FROM h.rate_key
          AND s.scheduled_at <= statement_timestamp()
          AND (%(run_id)s::uuid IS NULL OR coalesce(s.root_run_id, s.run_id) = %(run_id)s::uuid)
        ORDER BY s.priority, s.scheduled_at, s.id
        LIMIT greatest(least(room.slots, room.rate_room), 0)
        FOR UPDATE SKIP LOCKED) c
    LIMIT %(limit)s
), picked AS (
    -- keys that share a rate key take its room together, in walk order
    SELECT x.id, x.state, x.k
    FROM (SELECT c.id, c.state, c.k, c.rate_key, c.rate_room,
                 row_number() OVER (PARTITION BY c.rate_key ORDER BY c.id) AS n
          FROM candidates c) x
    WHERE x.rate_key IS NULL OR x.n <= x.rate_room
), claimed AS (
    UPDATE {schema}.cyclone_steps s
    SET state = 'running',
        lease_owner = %(owner)s,
        lease_expiry = statement_timestamp() + (%(ttl_us)s::bigint * interval '1 microsecond'),
        heartbeat_at = statement_timestamp(),
        started_at = statement_timestamp(),
        lease_generation = s.lease_generation + 1
    FROM picked p
    -- the CAS guard: still in the state it was locked in ('available'). Written as
    -- p.state, not the literal, so that no partial index on state = 'available' can serve
    -- this join: on statistics that see no available step, the planner read the whole
    -- claim index here instead of the primary key
    WHERE s.id = p.id AND s.state = p.state
    RETURNING s.id, s.run_id, s.node, s.type, s.call, s.queue, s.attempt, s.max_attempts,
              s.reclaims, s.lease_generation, s.input,
              extract(epoch FROM s.timeout)::float8 AS timeout_s,
              greatest(extract(epoch FROM statement_timestamp() - s.scheduled_at), 0)::float8
                  AS wait_s,
              s.parent_node, s.item_index, s.item,
              CASE WHEN (s.input IS NULL AND s.parent_node IS NULL)
                        OR strpos(s.input::text, 'run.input') > 0
                   THEN (SELECT r.input::text FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
              END AS run_input,
              s.traceparent,
              CASE WHEN s.traceparent IS NOT NULL
                   THEN (SELECT r.flow_name FROM {schema}.cyclone_runs r WHERE r.id = s.run_id)
              END AS flow_name,
              p.k AS limit_key, s.rate_key, s.rate_per
), counted AS (
    -- each rate key's log, read by this statement (after the lock: every earlier claim
    -- counted), with this claim's steps added (cyclone_rate_log_next, migration 0014:
    -- inlined), written back whole
    INSERT INTO {schema}.cyclone_rate_windows AS rw
        (rate_key, rate_per, bucket_ends, bucket_claims)
    SELECT g.rate_key, g.rate_per, l.new_ends, l.new_claims
    FROM (SELECT c.rate_key, max(c.rate_per) AS rate_per, count(*)::int AS n
          FROM claimed c
          WHERE c.rate_key IS NOT NULL
          GROUP BY c.rate_key) g
    LEFT JOIN {schema}.cyclone_rate_windows old ON old.rate_key = g.rate_key
    CROSS JOIN LATERAL {schema}.cyclone_rate_log_next(
        old.bucket_ends, old.bucket_claims, g.rate_per, statement_timestamp(), g.n) l
    ON CONFLICT (rate_key) DO UPDATE
    SET (bucket_ends, bucket_claims, rate_per) =
        (excluded.bucket_ends, excluded.bucket_claims, excluded.rate_per)
)
SELECT id, run_id, node, type, call, queue, attempt, max_attempts, reclaims, lease_generation,
       input, timeout_s, wait_s, parent_node, item_index, item, run_input, traceparent,
       flow_name, limit_key
FROM claimed
ORDER BY id

-- name: step_count_running_by_concurrency_key
-- The running steps of each of the concurrency keys %(keys)s (the slots they hold; read
-- through cyclone_steps_concurrency_running_idx): "why is it waiting".
SELECT concurrency_key, count(*)::int
FROM {schema}.cyclone_steps
WHERE state = 'running' AND concurrency_key = ANY(%(keys)s::text[])
GROUP BY concurrency_key

-- name: step_set_limit_keys_if_available
-- Set the keys of the available limited steps of queue %(queue)s whose keys refer to
-- an upstream output (limit_plan; the step's ancestors have completed) with
-- cyclone_limit_key (migration 0013: the group, then '/' and the value at the key's path
-- in that node's output, or in the run input, or its literal text). Sent in a limited
-- claim's transaction after step_begin_limited_claim and before
-- step_claim_limited_if_available, which then walks them under their keys. SKIP LOCKED: a
-- row another transaction holds waits for the next claim. Reads
-- cyclone_steps_limits_unrendered_idx (empty unless such keys exist; no ORDER BY: in the
-- claim's transaction, with sorts off, one would walk the primary key instead).
WITH todo AS (
    SELECT id, run_id, limit_plan FROM {schema}.cyclone_steps
    WHERE state = 'available' AND claim_owner = '~limits' AND queue = %(queue)s
      AND limit_plan IS NOT NULL AND concurrency_key IS NULL AND rate_key IS NULL
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
), keyed AS (
    SELECT t.id,
           {schema}.cyclone_limit_key(t.limit_plan->'concurrency', r.input, uc.output)
               AS concurrency_key,
           (t.limit_plan #>> '{{concurrency,limit}}')::int AS concurrency_limit,
           {schema}.cyclone_limit_key(t.limit_plan->'rate_limit', r.input, ur.output)
               AS rate_key,
           (t.limit_plan #>> '{{rate_limit,limit}}')::int AS rate_limit,
           make_interval(secs => (t.limit_plan #>> '{{rate_limit,per_s}}')::float8) AS rate_per
    FROM todo t
    JOIN {schema}.cyclone_runs r ON r.id = t.run_id
    LEFT JOIN {schema}.cyclone_steps uc
        ON uc.run_id = t.run_id AND uc.node = t.limit_plan #>> '{{concurrency,node}}'
    LEFT JOIN {schema}.cyclone_steps ur
        ON ur.run_id = t.run_id AND ur.node = t.limit_plan #>> '{{rate_limit,node}}'
)
UPDATE {schema}.cyclone_steps s
SET concurrency_key = k.concurrency_key,
    concurrency_limit = k.concurrency_limit,
    rate_key = k.rate_key,
    rate_limit = k.rate_limit,
    rate_per = k.rate_per
FROM keyed k
WHERE s.id = k.id

-- name: step_begin_limited_claim
-- First in a limited claim's transaction (after BEGIN), in one statement: the settings of
-- the transaction, then the advisory lock (per schema) that serializes the limited claims,
-- held to the commit; the claim's own snapshot, taken after it, then counts every running
-- step and window claim committed before (docs/flow-control.md). The settings, each to the
-- end of the transaction (set_config(..., true) = SET LOCAL):
-- * plan_cache_mode = force_generic_plan: a custom plan of the claim costs more to plan,
--   every time, than it takes to run;
-- * synchronous_commit = off: the COMMIT does not wait for the WAL flush (about a
--   millisecond), so the lock is held for the claim's work only. The claim is visible to
--   the next claimer's snapshot at once (the counts stay exact); only its durability waits
--   for the WAL writer (at most 3 x wal_writer_delay) or for any later synchronous commit,
--   such as the step's completion. What a database crash can lose: the claims of that last
--   moment, whose steps are available again after recovery;
-- * enable_sort = off, enable_seqscan = off: every read of the claim walks an index in its
--   order (cyclone_steps_limited_idx for the keys and their heads). Whatever the statistics
--   say: on a table not analyzed since a large submit, the planner estimated one row and
--   sorted the queue's whole backlog (read through cyclone_steps_claim_idx) once per key
--   probe, tens of milliseconds per claim;
-- * jit = off: the disable cost (1e10) that enable_* = off adds to any plan still holding a
--   sort or a sequential scan is past every jit_*_above_cost, so a server with JIT (Debian's
--   packages: jit = on) compiled the claim each time: 1.7 s per claim (issue 31.1).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('synchronous_commit', 'off', true),
       set_config('enable_sort', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('jit', 'off', true),
       pg_advisory_xact_lock(1130066762, hashtext('{schema}'))

-- name: step_exists_limited
-- Whether queue %(queue)s has an available limited step (claimable now or later): the
-- worker keeps running the limited claim for the queue while it has. The claim_owner test
-- is written twice so that either index the planner may pick reads the limited steps only:
-- cyclone_steps_limited_idx by its predicate, cyclone_steps_claim_idx by its second
-- column. Sent after session_set_index_order: no sequential scan, which would read the
-- completed steps first in the heap before the first limited one.
SELECT EXISTS (
    SELECT 1 FROM {schema}.cyclone_steps
    WHERE state = 'available' AND queue = %(queue)s
      AND claim_owner = '~limits' AND coalesce(claim_owner, '') = '~limits')

-- name: step_get_next_rate_token
-- The seconds until the rate key of the head of one of queue %(queue)s's limited keys,
-- out of tokens (its counted claims at its limit), gets a claim back (its oldest counted
-- claim leaves the sliding window: that bucket's end + rate_per, the rule of
-- step_claim_limited_if_available), or NULL when no head waits for a rate token (a key
-- held by its concurrency limit alone is woken by the completion that frees its slot).
-- After a limited claim that took nothing: nothing else wakes a worker when a token comes
-- back, so it claims again then instead of backing off to its longest poll. Walks the keys as the claim does (one probe per key, cyclone_steps_limited_idx);
-- sent after session_set_index_order.
WITH RECURSIVE walk(k) AS (
    (SELECT (coalesce(concurrency_key, rate_key) COLLATE "C") FROM {schema}.cyclone_steps
     WHERE state = 'available' AND claim_owner = '~limits' AND queue = %(queue)s
     ORDER BY (coalesce(concurrency_key, rate_key) COLLATE "C")
     LIMIT 1)
    UNION ALL
    SELECT (SELECT (coalesce(s.concurrency_key, s.rate_key) COLLATE "C")
            FROM {schema}.cyclone_steps s
            WHERE s.state = 'available' AND s.claim_owner = '~limits' AND s.queue = %(queue)s
              AND (coalesce(s.concurrency_key, s.rate_key) COLLATE "C") > w.k
            ORDER BY (coalesce(s.concurrency_key, s.rate_key) COLLATE "C")
            LIMIT 1)
    FROM walk w
    WHERE w.k IS NOT NULL
)
SELECT extract(epoch FROM min(t.back_at) - statement_timestamp())::float8
FROM walk w
CROSS JOIN LATERAL (
    SELECT h.rate_key, h.rate_limit, h.rate_per
    FROM {schema}.cyclone_steps h
    WHERE h.state = 'available' AND h.claim_owner = '~limits' AND h.queue = %(queue)s
      AND (coalesce(h.concurrency_key, h.rate_key) COLLATE "C") = w.k
    ORDER BY h.priority, h.scheduled_at, h.id
    LIMIT 1) h
JOIN {schema}.cyclone_rate_windows rw ON rw.rate_key = h.rate_key
CROSS JOIN LATERAL (
    SELECT min(u.e) + h.rate_per AS back_at, sum(u.c) AS counted
    FROM unnest(rw.bucket_ends, rw.bucket_claims) AS u(e, c)
    WHERE u.e > statement_timestamp() - h.rate_per) t
WHERE w.k IS NOT NULL AND t.counted >= h.rate_limit  -- out of tokens: what holds it

-- name: step_complete_fan_out_if_waiting
-- waiting -> completed with the item outputs in item order (jsonb_agg), or -> discarded
-- with payload_too_large when that list is over the output limit of the client that
-- submitted the run (Client Options: Limits and Retention).
UPDATE {schema}.cyclone_steps p
SET state = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647)
                 THEN 'completed' ELSE 'discarded' END,
    output = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647) THEN a.list END,
    error = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647) THEN NULL
                 ELSE format('collected output of %%s items is %%s bytes, over the limit of %%s bytes',
                             p.items_total, a.size, r.output_limit) END,
    error_kind = CASE WHEN a.size <= coalesce(r.output_limit, 2147483647)
                      THEN NULL ELSE 'payload_too_large' END,
    finished_at = statement_timestamp()
FROM (SELECT l.list, octet_length(l.list::text) AS size
      FROM (SELECT coalesce(jsonb_agg(i.output ORDER BY i.item_index), '[]'::jsonb) AS list
            FROM {schema}.cyclone_steps i
            WHERE i.run_id = %(run_id)s AND i.parent_node = %(node)s) l) a,
     {schema}.cyclone_runs r
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting' AND r.id = p.run_id
RETURNING p.state, p.error, p.queue

-- name: step_complete_from_child_if_waiting
-- A child run completed, in its completion transaction: the child node waiting for it ->
-- completed with the child run's output, or -> discarded with payload_too_large when that
-- output is over the output limit of the client that submitted the run.
UPDATE {schema}.cyclone_steps p
SET state = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647)
                 THEN 'completed' ELSE 'discarded' END,
    output = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647) THEN c.output END,
    error = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647) THEN NULL
                 ELSE format('output of child run %%s is %%s bytes, over the limit of %%s bytes',
                             c.id, c.size, pr.output_limit) END,
    error_kind = CASE WHEN c.size <= coalesce(pr.output_limit, 2147483647)
                      THEN NULL ELSE 'payload_too_large' END,
    finished_at = statement_timestamp()
FROM (SELECT id, output, octet_length(output::text) AS size FROM {schema}.cyclone_runs
      WHERE id = %(child_run_id)s) c,
     {schema}.cyclone_runs pr
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'
  AND p.child_run_id = %(child_run_id)s AND pr.id = p.run_id
RETURNING p.state, p.error, p.queue

-- name: step_complete_if_leased
-- running -> completed with the output, guarded by the claim's owner and lease_generation,
-- and by the step's timeout: a completion after started_at + timeout is late even before
-- the sweep took the step (the timeout is durable); zero rows means stale (CAS State
-- Transitions). statement_timestamp(), not now(): the completion transaction may have been
-- opened early in the handler. Returns the output as the database stores it (jsonb text)
-- for the worker's output cache (Output Resolution).
UPDATE {schema}.cyclone_steps
SET state = 'completed', output = %(output)s, finished_at = statement_timestamp(), lease_expiry = NULL
WHERE id = %(id)s AND state = 'running'
  AND lease_owner = %(owner)s AND lease_generation = %(generation)s
  AND (timeout IS NULL OR started_at + timeout > statement_timestamp())
RETURNING run_id, parent_node, output::text

-- name: step_complete_if_leased_many
-- Group commit of completions: running -> completed for a batch of steps whose
-- handlers did not open ctx.completion_tx(), each row guarded exactly as
-- step_complete_if_leased by its own claim (%(owner)s and its lease_generation) and its
-- timeout (CAS State Transitions). A step missing from the result is stale. Runs under the
-- run row locks of run_lock_many. Returns each completed step's id, lease_generation,
-- run_id, parent_node and output as the database stores it (jsonb text).
UPDATE {schema}.cyclone_steps s
SET state = 'completed', output = b.output::jsonb, finished_at = statement_timestamp(),
    lease_expiry = NULL
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[], %(outputs)s::text[])
     AS b(id, generation, output)
WHERE s.id = b.id AND s.state = 'running'
  AND s.lease_owner = %(owner)s AND s.lease_generation = b.generation
  AND (s.timeout IS NULL OR s.started_at + s.timeout > statement_timestamp())
RETURNING s.id, s.lease_generation, s.run_id, s.parent_node, s.output::text

-- name: step_complete_if_waiting
-- waiting -> completed with %(output)s (a signal's payload, a child run's output); returns
-- the node's queue (its step events are counted on it).
UPDATE {schema}.cyclone_steps
SET state = 'completed', output = %(output)s, finished_at = statement_timestamp()
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
RETURNING queue

-- name: step_count_active
-- How many steps of the given queues are available (at any scheduled_at) or running:
-- zero means a worker serving them has nothing left to do (worker --exit-when-idle).
SELECT count(*) FROM {schema}.cyclone_steps
WHERE state IN ('available', 'running') AND queue = ANY(%(queues)s::text[])

-- name: step_count_active_other_calls
-- step_count_active without the available steps whose call is in %(skip_calls)s: the calls
-- this worker gives back because it cannot import them (issue 30.2), which it will never
-- run; zero means it has nothing left that it can do (worker --exit-when-idle).
SELECT count(*) FROM {schema}.cyclone_steps
WHERE state IN ('available', 'running') AND queue = ANY(%(queues)s::text[])
  AND NOT (state = 'available' AND coalesce(call, '') = ANY(%(skip_calls)s::text[]))

-- name: step_count_by_queue
-- Observability (worker --metrics-port, the dashboard): per queue, the steps claimable now
-- (the depth), those available later (backoff), those running, and the age in seconds of
-- the oldest claimable one, all by the database's now(). Two reads of the partial indexes
-- (cyclone_steps_claim_idx: available rows, cyclone_steps_running_idx: running rows), not a
-- scan of every step.
WITH avail AS (
    SELECT queue,
           count(*) FILTER (WHERE scheduled_at <= now()) AS available,
           count(*) FILTER (WHERE scheduled_at > now()) AS scheduled,
           min(scheduled_at) FILTER (WHERE scheduled_at <= now()) AS oldest
    FROM {schema}.cyclone_steps
    WHERE state = 'available'
    GROUP BY queue
), busy AS (
    SELECT queue, count(*) AS running
    FROM {schema}.cyclone_steps
    WHERE state = 'running'
    GROUP BY queue
)
SELECT coalesce(a.queue, b.queue) AS queue,
       coalesce(a.available, 0) AS available,
       coalesce(a.scheduled, 0) AS scheduled,
       coalesce(b.running, 0) AS running,
       coalesce(extract(epoch FROM now() - a.oldest), 0)::float8 AS oldest_available_s
FROM avail a
FULL JOIN busy b ON b.queue = a.queue
ORDER BY 1

-- name: step_count_finished_by_queue
-- Dashboard throughput: per queue, the steps finished (completed or discarded) in the last
-- minute and the last hour by the database's now(), at most %(cap)s counted. No index on
-- cyclone_steps.finished_at: the steps are found through their runs (cyclone_steps_run_node_key)
-- that finished in the hour (cyclone_runs_finished_idx, newest %(cap)s) or have a step
-- running (cyclone_steps_running_idx) or claimable (cyclone_steps_claim_idx, %(active)s
-- runs at most) now; a step of a run doing neither (waiting for a signal) is not counted.
WITH recent AS (
    SELECT f.id FROM (
        SELECT id FROM {schema}.cyclone_runs
        WHERE state <> 'running' AND finished_at >= now() - interval '1 hour'
        ORDER BY finished_at DESC
        LIMIT %(cap)s) f
    UNION
    SELECT a.run_id FROM (
        SELECT run_id FROM {schema}.cyclone_steps WHERE state = 'running'
        UNION
        (SELECT run_id FROM {schema}.cyclone_steps WHERE state = 'available' LIMIT %(active)s)
    ) a
), done AS (
    SELECT s.queue, s.finished_at
    FROM recent r
    JOIN {schema}.cyclone_steps s ON s.run_id = r.id
    WHERE s.state IN ('completed', 'discarded') AND s.finished_at >= now() - interval '1 hour'
    LIMIT %(cap)s
)
SELECT queue,
       count(*) FILTER (WHERE finished_at >= now() - interval '1 minute')::int AS last_minute,
       count(*)::int AS last_hour
FROM done
GROUP BY queue
ORDER BY queue

-- name: step_count_by_lease_owner
-- Running steps per lease owner (client id): the steps each worker holds (dashboard; the
-- partial index cyclone_steps_running_idx holds exactly these rows).
SELECT lease_owner, count(*)::int AS n
FROM {schema}.cyclone_steps
WHERE state = 'running'
GROUP BY lease_owner

-- name: step_add_items_done_if_waiting
-- %(n)s items of a waiting fan-out node completed (1, or more in a group commit): count
-- them on the node and, unless they were the last ones, release the next pending items up
-- to max_parallel (as step_release_items_if_room), in one statement. Returns the node's
-- done and total counts and the queue of the items released (NULL: none).
WITH parent AS (
    UPDATE {schema}.cyclone_steps
    SET items_done = items_done + %(n)s
    WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
    RETURNING run_id, node, items_done, items_total, max_parallel, queue
), released AS (
    UPDATE {schema}.cyclone_steps s
    SET state = 'available', scheduled_at = greatest(s.scheduled_at, statement_timestamp())
    WHERE s.id IN (
            SELECT i.id FROM {schema}.cyclone_steps i
            WHERE i.run_id = %(run_id)s AND i.parent_node = %(node)s AND i.state = 'pending'
            ORDER BY i.item_index
            LIMIT coalesce((
                SELECT CASE WHEN p.items_done >= p.items_total THEN 0
                            WHEN p.max_parallel IS NULL THEN 2147483647
                            ELSE greatest(0, p.max_parallel - (
                                SELECT count(*) FROM {schema}.cyclone_steps a
                                WHERE a.run_id = %(run_id)s AND a.parent_node = %(node)s
                                  AND a.state IN ('available', 'running'))) END
                FROM parent p), 0))
      AND s.state = 'pending'
    RETURNING s.id
)
SELECT p.items_done, p.items_total,
       CASE WHEN EXISTS (SELECT 1 FROM released) THEN p.queue END
FROM parent p

-- name: step_count_items
-- Item counts per fan-out node and state, for status.
SELECT parent_node, state, count(*)
FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND parent_node IS NOT NULL
GROUP BY parent_node, state

-- name: step_discard_if_wait_expired
-- Wait scanner: waiting -> discarded with error_kind timeout, guarded by wait_until (a
-- signal or a child that finished meanwhile wins; zero rows is stale).
-- %(now)s pins the clock (tests; NULL: the database's now()).
UPDATE {schema}.cyclone_steps
SET state = 'discarded', finished_at = statement_timestamp(), error = %(error)s,
    error_kind = 'timeout',
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'error', %(error)s::text, 'error_kind', 'timeout',
        'traceback', NULL, 'at', statement_timestamp()))
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
  AND wait_until IS NOT NULL AND wait_until <= coalesce(%(now)s::timestamptz, now())
RETURNING type, child_run_id

-- name: step_discard_if_released
-- A released node whose when: condition could not be evaluated (e.g. '<' between a
-- string and a number): available or waiting -> discarded with the error, which joins its
-- error history, in the transaction that released it. Returns the node's queue.
UPDATE {schema}.cyclone_steps
SET state = 'discarded', finished_at = statement_timestamp(), error = %(error)s,
    error_kind = %(error_kind)s,
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'error', %(error)s::text, 'error_kind', %(error_kind)s::text,
        'traceback', NULL, 'at', statement_timestamp()))
WHERE run_id = %(run_id)s AND node = %(node)s AND state IN ('available', 'waiting')
  AND parent_node IS NULL
RETURNING queue

-- name: step_discard_if_waiting
-- waiting -> discarded with an error (a bad fan-out list, a failed child or item, an
-- expired wait); the error joins the step's error history. With %(child_run_id)s set,
-- only while the node still waits for that child run. Returns the node's queue too.
UPDATE {schema}.cyclone_steps
SET state = 'discarded', finished_at = statement_timestamp(), error = %(error)s,
    error_kind = %(error_kind)s,
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'error', %(error)s::text, 'error_kind', %(error_kind)s::text,
        'traceback', NULL, 'at', statement_timestamp()))
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'
  AND (%(child_run_id)s::uuid IS NULL OR child_run_id = %(child_run_id)s::uuid)
RETURNING node, child_run_id, queue

-- name: step_disown_if_owner_gone
-- The owner release (isolated runs): clear claim_owner of the steps whose owner has no
-- cyclone_workers row heartbeated within its lease_ttl of now (the database clock, or a
-- pinned instant): a dead or stopped `cyclone-flow run` process's run goes to the
-- workers. SKIP LOCKED: a row an engine transaction holds waits for the next pass (no
-- lock wait, no deadlock). Returns each released step's queue and whether it is claimable
-- now (the wakeups). A limited step's '~limits' is no owner (cyclone_steps_owned_idx
-- leaves it out).
WITH gone AS (
    SELECT s.id
    FROM {schema}.cyclone_steps s
    WHERE s.claim_owner IS NOT NULL AND s.claim_owner <> '~limits'
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.cyclone_workers w
          WHERE w.client_id = s.claim_owner
            AND w.heartbeat_at >= coalesce(%(now)s::timestamptz, now()) - w.lease_ttl)
    ORDER BY s.id
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE {schema}.cyclone_steps s
SET claim_owner = NULL
FROM gone g
WHERE s.id = g.id
RETURNING s.queue, s.state = 'available' AND s.scheduled_at <= now() AS due

-- name: step_extend_lease_if_held_many
-- Renew the leases this client holds, each guarded by its own lease_generation; a step past
-- started_at + timeout is not renewed, which makes the timeout durable (Engine Design:
-- Leases and Heartbeats). Returns the (id, generation) pairs renewed; a missing one lost
-- its lease.
UPDATE {schema}.cyclone_steps s
SET lease_expiry = now() + (%(ttl_us)s::bigint * interval '1 microsecond'),
    heartbeat_at = now()
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[]) AS h(id, generation)
WHERE s.id = h.id
  AND s.state = 'running'
  AND s.lease_owner = %(owner)s
  AND s.lease_generation = h.generation
  AND (s.timeout IS NULL OR s.started_at + s.timeout > now())
RETURNING s.id, s.lease_generation

-- name: step_fail_if_leased
-- A failed attempt of a running step, guarded by lease_generation (and, when a worker
-- reports it, by the owner and the timeout: past started_at + timeout only a timeout
-- failure counts, which timed_out marks and requires the deadline to have passed): back
-- to available at now() + backoff while attempts remain and the failure is not permanent,
-- else discarded (dead letter). Each attempt's error is appended to errors. The backoff
-- is min(max, initial * multiplier^(attempt - 1) * (1 +/- jitter)), computed as
-- exp(min(ln max, ln initial + (attempt - 1) * ln multiplier)) so that no stored value
-- and no attempt number can overflow or underflow float8: every parameter is clamped in
-- numeric first (initial and max to 0 or [1ms, 366d], multiplier to [1, 1e300], jitter to
-- [0, 1]), the exponent never exceeds ln max (attempt 10,000 waits max) and the jitter
-- never pushes the wait past max; an initial or max of 0 means no wait (Engine Design:
-- Failure Propagation, Leases and Heartbeats). step_fail_without_backoff_if_leased records
-- the attempt when even this cannot be computed (a stored backoff that is not numbers).
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN p.retry THEN 'available' ELSE 'discarded' END,
    attempt = CASE WHEN p.retry THEN s.attempt + 1 ELSE s.attempt END,
    scheduled_at = CASE WHEN p.retry THEN statement_timestamp() + p.delay_s * interval '1 second'
                        ELSE s.scheduled_at END,
    finished_at = CASE WHEN p.retry THEN NULL ELSE statement_timestamp() END,
    lease_owner = CASE WHEN p.retry THEN NULL ELSE s.lease_owner END,
    lease_expiry = NULL,
    heartbeat_at = CASE WHEN p.retry THEN NULL ELSE s.heartbeat_at END,
    import_wait_since = NULL, import_wait_reason = NULL,
    error = %(error)s,
    error_kind = %(error_kind)s,
    errors = s.errors || jsonb_build_array(jsonb_build_object(
        'attempt', s.attempt, 'error', %(error)s::text, 'error_kind', %(error_kind)s::text,
        'traceback', %(traceback)s::text, 'at', statement_timestamp()))
FROM (
    SELECT b.id, b.retry,
           CASE WHEN b.initial_s <= 0 OR b.max_s <= 0 THEN 0
                ELSE least(b.max_s,
                           exp(least(ln(b.max_s),
                                     ln(b.initial_s)
                                     + greatest(b.attempt - 1, 0) * ln(b.multiplier)))
                           * (1 + b.jitter * (2 * random() - 1)))
           END AS delay_s
    FROM (
        SELECT c.id, c.attempt, c.retry,
               (CASE WHEN c.initial_n <= 0 THEN 0
                     ELSE least(greatest(c.initial_n, 0.001), 31622400) END)::float8 AS initial_s,
               (CASE WHEN c.max_n <= 0 THEN 0
                     ELSE least(greatest(c.max_n, 0.001), 31622400) END)::float8 AS max_s,
               least(greatest(c.multiplier_n, 1), 1e300)::float8 AS multiplier,
               least(greatest(c.jitter_n, 0), 1)::float8 AS jitter
        FROM (
            SELECT id, attempt,
                   attempt < max_attempts AND NOT %(permanent)s::boolean AS retry,
                   coalesce((backoff->>'initial_s')::numeric, 1) AS initial_n,
                   coalesce((backoff->>'max_s')::numeric, 300) AS max_n,
                   coalesce((backoff->>'multiplier')::numeric, 2) AS multiplier_n,
                   coalesce((backoff->>'jitter')::numeric, 0.1) AS jitter_n
            FROM {schema}.cyclone_steps
            WHERE id = %(id)s
        ) c
    ) b
) p
WHERE s.id = p.id
  AND s.state = 'running'
  AND s.lease_generation = %(generation)s
  AND (%(owner)s::text IS NULL
       OR (s.lease_owner = %(owner)s
           AND (s.timeout IS NULL OR s.started_at + s.timeout > statement_timestamp())))
  AND (NOT %(timed_out)s::boolean
       OR (s.timeout IS NOT NULL AND s.started_at + s.timeout <= statement_timestamp()))
RETURNING s.run_id, s.node, s.state, s.queue, s.attempt, s.parent_node

-- name: step_fail_without_backoff_if_leased
-- step_fail_if_leased without reading the step's backoff (used when computing it raised a
-- data error, in a fresh transaction): the same guards and the same record of the
-- attempt, but a retry is available at once, so a failure is never left unrecorded.
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN p.retry THEN 'available' ELSE 'discarded' END,
    attempt = CASE WHEN p.retry THEN s.attempt + 1 ELSE s.attempt END,
    scheduled_at = CASE WHEN p.retry THEN statement_timestamp() ELSE s.scheduled_at END,
    finished_at = CASE WHEN p.retry THEN NULL ELSE statement_timestamp() END,
    lease_owner = CASE WHEN p.retry THEN NULL ELSE s.lease_owner END,
    lease_expiry = NULL,
    heartbeat_at = CASE WHEN p.retry THEN NULL ELSE s.heartbeat_at END,
    import_wait_since = NULL, import_wait_reason = NULL,
    error = %(error)s,
    error_kind = %(error_kind)s,
    errors = s.errors || jsonb_build_array(jsonb_build_object(
        'attempt', s.attempt, 'error', %(error)s::text, 'error_kind', %(error_kind)s::text,
        'traceback', %(traceback)s::text, 'at', statement_timestamp()))
FROM (
    SELECT id, attempt < max_attempts AND NOT %(permanent)s::boolean AS retry
    FROM {schema}.cyclone_steps
    WHERE id = %(id)s
) p
WHERE s.id = p.id
  AND s.state = 'running'
  AND s.lease_generation = %(generation)s
  AND (%(owner)s::text IS NULL
       OR (s.lease_owner = %(owner)s
           AND (s.timeout IS NULL OR s.started_at + s.timeout > statement_timestamp())))
  AND (NOT %(timed_out)s::boolean
       OR (s.timeout IS NOT NULL AND s.started_at + s.timeout <= statement_timestamp()))
RETURNING s.run_id, s.node, s.state, s.queue, s.attempt, s.parent_node

-- name: step_get_condition_inputs
-- What a released node's when: condition reads, in one statement: the run's input and,
-- for each node of %(nodes)s, {"state", "output"} (a mapping by node name), as JSON text.
SELECT r.input::text AS run_input,
       (SELECT coalesce(jsonb_object_agg(s.node, jsonb_build_object('state', s.state,
                                                                    'output', s.output)),
                        '{{}}'::jsonb)
        FROM {schema}.cyclone_steps s
        WHERE s.run_id = r.id AND s.node = ANY(%(nodes)s::text[]))::text AS upstream
FROM {schema}.cyclone_runs r
WHERE r.id = %(run_id)s

-- name: step_get_list_shape
-- The JSON type and length of the list a fan-out node iterates: a literal list, a part of
-- the run input, or a part of an upstream output (path as text[]; NULL when missing).
-- The list itself stays in the database.
SELECT jsonb_typeof(l.list),
       CASE WHEN jsonb_typeof(l.list) = 'array' THEN jsonb_array_length(l.list) END
FROM (SELECT CASE
          WHEN %(literal)s::jsonb IS NOT NULL THEN %(literal)s::jsonb
          WHEN %(from_node)s::text IS NULL
              THEN (SELECT r.input #> %(path)s::text[] FROM {schema}.cyclone_runs r
                    WHERE r.id = %(run_id)s)
          ELSE (SELECT u.output #> %(path)s::text[] FROM {schema}.cyclone_steps u
                WHERE u.run_id = %(run_id)s AND u.node = %(from_node)s)
      END AS list) l

-- name: step_get_node_info
-- What the engine needs to start a released fan_out, child or wait_signal node
-- (not_before: the start of a delayed run that has not started yet).
SELECT s.type, s.queue, s.input, s.over, s.signal, s.child_workflow_id,
       w.definition->'input_schema' AS child_input_schema,
       CASE WHEN s.scheduled_at > statement_timestamp() THEN s.scheduled_at END AS not_before
FROM {schema}.cyclone_steps s
LEFT JOIN {schema}.cyclone_workflows w ON w.id = s.child_workflow_id
WHERE s.run_id = %(run_id)s AND s.node = %(node)s

-- name: step_get_output
-- The output of one node of a run as JSON text (output resolution by (run_id, node)).
SELECT output::text, state FROM {schema}.cyclone_steps WHERE run_id = %(run_id)s AND node = %(node)s

-- name: step_get_output_shown
-- One step's output as a reader sees it (cyclone-flow output, Client.get_step_output, the
-- dashboard): the top-level node %(node)s, or with %(parent)s its fan-out item named so;
-- the output left out (truncated) when its JSON text is over %(max_bytes)s bytes (NULL:
-- no cap). One read of cyclone_steps_run_node_key.
SELECT s.node, s.type, s.state, s.parent_node, s.item_index, s.items_total,
       CASE WHEN %(max_bytes)s::int IS NULL OR octet_length(s.output::text) <= %(max_bytes)s::int
            THEN s.output END AS output,
       octet_length(s.output::text) AS output_bytes,
       coalesce(octet_length(s.output::text) > %(max_bytes)s::int, false) AS truncated
FROM {schema}.cyclone_steps s
WHERE s.run_id = %(run_id)s AND s.node = %(node)s
  AND s.parent_node IS NOT DISTINCT FROM %(parent)s::text

-- name: step_get_signal_waiter
-- The first waiting wait_signal node of a run that awaits signal %(name)s.
SELECT node FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND type = 'wait_signal' AND signal = %(name)s AND state = 'waiting'
ORDER BY id
LIMIT 1

-- name: step_get_state
-- The state of one node of a run, and its fan-out node when it is an item.
SELECT state, parent_node FROM {schema}.cyclone_steps WHERE run_id = %(run_id)s AND node = %(node)s

-- name: step_give_back_if_leased
-- A worker that cannot import a step's call, or may not run it (outside its
-- --allow-module), gives the step back (issue 30.2, docs/failures.md): running ->
-- available with the lease cleared, no attempt and no reclaim charged, claimable again
-- %(delay_us)s microseconds from now; import_wait_since keeps the first give-back's
-- instant and import_wait_reason the worker's account. Guarded by owner and
-- lease_generation, and refused (no row) once the node's import_wait (the plan's
-- import_wait_s, a fan-out item's that of its node; 600 s when the plan has none) has
-- passed since the first give-back: the caller then discards the step with kind
-- import_error (step_fail_if_leased, permanent). statement_timestamp() throughout.
UPDATE {schema}.cyclone_steps s
SET state = 'available', lease_owner = NULL, lease_expiry = NULL, heartbeat_at = NULL,
    scheduled_at = statement_timestamp() + %(delay_us)s::bigint * interval '1 microsecond',
    import_wait_since = coalesce(s.import_wait_since, statement_timestamp()),
    import_wait_reason = %(reason)s::text
FROM (
    SELECT coalesce((
        SELECT (e.value->>'import_wait_s')::float8
        FROM {schema}.cyclone_runs r
        JOIN {schema}.cyclone_workflows w ON w.id = r.workflow_id
        CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') AS e(value)
        WHERE r.id = t.run_id AND e.value->>'node' = coalesce(t.parent_node, t.node)
        LIMIT 1), 600) AS wait_s
    FROM {schema}.cyclone_steps t
    WHERE t.id = %(id)s
) b
WHERE s.id = %(id)s AND s.state = 'running' AND s.lease_owner = %(owner)s
  AND s.lease_generation = %(generation)s
  AND coalesce(s.import_wait_since, statement_timestamp()) + make_interval(secs => b.wait_s)
      > statement_timestamp()
RETURNING s.queue, s.import_wait_since

-- name: step_insert_items_if_waiting
-- One item step per list element, in one INSERT ... SELECT over jsonb_array_elements:
-- named NODE[i] (0-based), with the node's call, queue, priority, retry and timeout; the
-- first max_parallel items available, the rest pending, none claimable before the node's
-- scheduled_at (a delayed run); nothing while the node is not waiting. Items that exist
-- already (an operator retry expands the node again) are kept as they are. Each item
-- takes the node's limits (concurrency, rate_limit: they bound the items) and carries
-- the node's trace context (traceparent).
INSERT INTO {schema}.cyclone_steps
    (run_id, root_run_id, node, type, call, state, queue, priority, max_attempts, backoff,
     timeout, input, parent_node, item_index, item, scheduled_at, claim_owner,
     concurrency_key, concurrency_limit, rate_key, rate_limit, rate_per, limit_plan,
     traceparent)
SELECT p.run_id, p.root_run_id, p.node || '[' || (e.ord - 1) || ']', 'fan_out_item', p.call,
       CASE WHEN p.max_parallel IS NULL OR e.ord <= p.max_parallel
            THEN 'available' ELSE 'pending' END,
       p.queue, p.priority, p.max_attempts, p.backoff, p.timeout, p.input, p.node,
       (e.ord - 1)::int, e.value, greatest(p.scheduled_at, statement_timestamp()),
       p.claim_owner, p.concurrency_key, p.concurrency_limit, p.rate_key, p.rate_limit,
       p.rate_per, p.limit_plan, p.traceparent
FROM {schema}.cyclone_steps p
CROSS JOIN LATERAL jsonb_array_elements(CASE
          WHEN %(literal)s::jsonb IS NOT NULL THEN %(literal)s::jsonb
          WHEN %(from_node)s::text IS NULL
              THEN (SELECT r.input #> %(path)s::text[] FROM {schema}.cyclone_runs r
                    WHERE r.id = %(run_id)s)
          ELSE (SELECT u.output #> %(path)s::text[] FROM {schema}.cyclone_steps u
                WHERE u.run_id = %(run_id)s AND u.node = %(from_node)s)
      END) WITH ORDINALITY AS e(value, ord)
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'
ORDER BY e.ord
ON CONFLICT (run_id, node) DO NOTHING

-- name: step_insert_plan
-- Insert one step per node of a new run from its definition's compiled plan, in file order
-- (submit, or the start of a child run; Engine Design: Why Static DAGs): action roots
-- without a when: condition available, every other node pending (a conditional root is
-- decided by the release that follows); every step pending when %(hold)s (a held run of a
-- sequence). The submission's %(queue)s / %(priority)s replace those of the nodes that do
-- not set their own (Queues and Priority). No step is claimable before %(run_at)s, or
-- now() plus %(delay_us)s microseconds (a delayed run). Returns each step's queue, state,
-- and whether it is claimable now. claim_owner: the owner of the top run (an isolated run),
-- or '~limits' for a node with limits (claimed by step_claim_limited_if_available only),
-- whose keys are rendered here by cyclone_limit_key (migration 0013: the plan's group,
-- then '/' and the run input at the key's path, or its literal text, when the key has
-- one; docs/flow-control.md); a key that refers to an upstream output leaves both keys
-- to step_set_limit_keys_if_available (limit_plan); traceparent: the run's trace context
-- (NULL: none), copied onto every step.
INSERT INTO {schema}.cyclone_steps
    (run_id, root_run_id, node, type, call, state, queue, priority, max_attempts, backoff,
     on_dep_failure, timeout, input, over, max_parallel, signal, max_wait, child_workflow_id,
     condition, on_dep_skip, scheduled_at, claim_owner, concurrency_key, concurrency_limit,
     rate_key, rate_limit, rate_per, limit_plan, traceparent)
SELECT %(run_id)s, %(root_run_id)s, p.node, p.type, p.call,
       CASE WHEN p.type = 'action' AND jsonb_array_length(p.needs) = 0
                 AND p."when" IS NULL AND NOT %(hold)s::boolean
            THEN 'available' ELSE 'pending' END,
       CASE WHEN %(queue)s::text IS NULL OR coalesce(p.queue_own, false) THEN p.queue
            ELSE %(queue)s::text END,
       CASE WHEN %(priority)s::int IS NULL OR coalesce(p.priority_own, false) THEN p.priority
            ELSE %(priority)s::int END,
       p.max_attempts, p.backoff, p.on_dep_failure,
       make_interval(secs => p.timeout_s), p.input, p.over, p.max_parallel, p.signal,
       make_interval(secs => p.max_wait_s), p.child_workflow_id, p."when", p.on_dep_skip,
       coalesce(%(run_at)s::timestamptz,
                now() + (%(delay_us)s::bigint * interval '1 microsecond'), now()),
       CASE WHEN p.concurrency IS NULL AND p.rate_limit IS NULL
            THEN (SELECT r.owner FROM {schema}.cyclone_runs r
                  WHERE r.id = coalesce(%(root_run_id)s::uuid, %(run_id)s::uuid))
            ELSE '~limits' END,
       {schema}.cyclone_limit_key(l.c, (SELECT r.input FROM {schema}.cyclone_runs r
                                        WHERE r.id = %(run_id)s::uuid), NULL),
       (l.c->>'limit')::int,
       {schema}.cyclone_limit_key(l.r, (SELECT r.input FROM {schema}.cyclone_runs r
                                        WHERE r.id = %(run_id)s::uuid), NULL),
       (l.r->>'limit')::int,
       make_interval(secs => (l.r->>'per_s')::float8),
       CASE WHEN l.later THEN jsonb_strip_nulls(jsonb_build_object(
                'concurrency', p.concurrency, 'rate_limit', p.rate_limit)) END,
       %(traceparent)s::text
FROM {schema}.cyclone_workflows w
CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') WITH ORDINALITY AS e(value, ord)
CROSS JOIN LATERAL jsonb_to_record(e.value) AS p(
    node text, type text, call text, needs jsonb, queue text, queue_own boolean,
    priority int, priority_own boolean, max_attempts int, backoff jsonb,
    on_dep_failure text, timeout_s float8, input jsonb, over jsonb, max_parallel int,
    signal text, max_wait_s float8, child_workflow_id bigint, "when" text, on_dep_skip text,
    concurrency jsonb, rate_limit jsonb)
-- the limits rendered now (c, r), or later when a key refers to an upstream output
CROSS JOIN LATERAL (
    SELECT CASE WHEN d.later THEN NULL ELSE p.concurrency END AS c,
           CASE WHEN d.later THEN NULL ELSE p.rate_limit END AS r, d.later
    FROM (SELECT coalesce(p.concurrency ? 'node', false)
                 OR coalesce(p.rate_limit ? 'node', false) AS later) d) l
WHERE w.id = %(workflow_id)s
ORDER BY e.ord
RETURNING queue, state, scheduled_at <= statement_timestamp() AS due

-- name: step_insert_plan_many
-- Insert the steps of a chunk of new top runs of one definition (bulk submit; see
-- step_insert_plan, of which this is the set form for runs that are not held and have
-- no owner): per run its %(queues)s / %(priorities)s override (NULL: none) and its start,
-- %(run_ats)s or now() plus %(delay_us)s microseconds (NULL both: now); one trace context
-- %(traceparent)s for the chunk (NULL: none). The plan's nodes are read once for the chunk.
WITH p AS MATERIALIZED (
    SELECT e.ord, r.*
    FROM {schema}.cyclone_workflows w
    CROSS JOIN LATERAL jsonb_array_elements(w.plan->'nodes') WITH ORDINALITY AS e(value, ord)
    CROSS JOIN LATERAL jsonb_to_record(e.value) AS r(
        node text, type text, call text, needs jsonb, queue text, queue_own boolean,
        priority int, priority_own boolean, max_attempts int, backoff jsonb,
        on_dep_failure text, timeout_s float8, input jsonb, over jsonb, max_parallel int,
        signal text, max_wait_s float8, child_workflow_id bigint, "when" text,
        on_dep_skip text)
    WHERE w.id = %(workflow_id)s
)
INSERT INTO {schema}.cyclone_steps
    (run_id, node, type, call, state, queue, priority, max_attempts, backoff,
     on_dep_failure, timeout, input, over, max_parallel, signal, max_wait, child_workflow_id,
     condition, on_dep_skip, scheduled_at, traceparent)
SELECT i.run_id, p.node, p.type, p.call,
       CASE WHEN p.type = 'action' AND jsonb_array_length(p.needs) = 0 AND p."when" IS NULL
            THEN 'available' ELSE 'pending' END,
       CASE WHEN i.queue IS NULL OR coalesce(p.queue_own, false) THEN p.queue
            ELSE i.queue END,
       CASE WHEN i.priority IS NULL OR coalesce(p.priority_own, false) THEN p.priority
            ELSE i.priority END,
       p.max_attempts, p.backoff, p.on_dep_failure,
       make_interval(secs => p.timeout_s), p.input, p.over, p.max_parallel, p.signal,
       make_interval(secs => p.max_wait_s), p.child_workflow_id, p."when", p.on_dep_skip,
       coalesce(i.run_at, now() + (i.delay_us * interval '1 microsecond'), now()),
       %(traceparent)s::text
FROM unnest(%(run_ids)s::uuid[], %(queues)s::text[], %(priorities)s::int[],
            %(run_ats)s::timestamptz[], %(delay_us)s::bigint[])
    WITH ORDINALITY AS i(run_id, queue, priority, run_at, delay_us, ord)
CROSS JOIN p
ORDER BY i.ord, p.ord

-- name: step_list_rerun_source
-- The top-level steps of the run a rerun is made from, with what decides whether they can
-- be reused: state, type, input template, over and when: condition, in creation order.
SELECT id, node, type, state, input, over, condition
FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND parent_node IS NULL
ORDER BY id

-- name: step_list_signal_names
-- The signal names the wait_signal nodes of a run await (any state), sorted: the
-- did-you-mean of a signal no node awaits.
SELECT DISTINCT signal FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND signal IS NOT NULL
ORDER BY signal

-- name: step_list
-- Every step of a run in creation order (fan-out items only when %(items)s).
SELECT id, node, type, call, state, queue, priority, attempt, max_attempts, reclaims,
       lease_owner, lease_expiry, lease_generation, started_at, finished_at, scheduled_at,
       output, error, error_kind, errors, parent_node, item_index, items_total, items_done,
       signal, wait_until, child_run_id, max_parallel, skip_reason, reused_from,
       concurrency_key, concurrency_limit, rate_key, rate_limit,
       extract(epoch FROM rate_per)::float8 AS rate_per_s, import_wait_since,
       import_wait_reason
FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND (%(items)s OR parent_node IS NULL)
ORDER BY id

-- name: step_list_items_page
-- One page of a fan-out node's item steps in item order: item_index >= %(start)s, at most
-- %(limit)s (a keyset on the dense item index, no OFFSET; the dashboard's items). Read
-- through the run's steps (cyclone_steps_run_node_key), sorted top-N.
SELECT id, node, type, call, state, queue, priority, attempt, max_attempts, reclaims,
       lease_owner, lease_expiry, lease_generation, started_at, finished_at, scheduled_at,
       output, error, error_kind, errors, parent_node, item_index, items_total, items_done,
       signal, wait_until, child_run_id, max_parallel, skip_reason, reused_from,
       concurrency_key, concurrency_limit, rate_key, rate_limit,
       extract(epoch FROM rate_per)::float8 AS rate_per_s, import_wait_since,
       import_wait_reason
FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND parent_node = %(node)s AND item_index >= %(start)s
ORDER BY item_index
LIMIT %(limit)s

-- name: step_list_given_back_calls
-- Per (queue, call) of %(queues)s x %(calls)s, the latest available step given back by a
-- worker that cannot import it (issue 30.2) within the last %(recent_s)s seconds (a give-back
-- sets scheduled_at to its instant + 1 s; a worker that keeps failing tries again at least
-- every 30 s): its reason and that scheduled_at. Why a never-claimed step of the same call
-- waits (explain.py). Reads the given-back steps only (the partial
-- cyclone_steps_given_back_idx); status only, never the claim path.
SELECT DISTINCT ON (queue, call) queue, call, import_wait_reason, scheduled_at
FROM {schema}.cyclone_steps
WHERE state = 'available' AND queue = ANY(%(queues)s::text[]) AND call = ANY(%(calls)s::text[])
  AND import_wait_reason IS NOT NULL
  AND scheduled_at > now() - %(recent_s)s::float8 * interval '1 second'
ORDER BY queue, call, scheduled_at DESC

-- name: step_list_discarded
-- The discarded nodes of a run.
SELECT node FROM {schema}.cyclone_steps WHERE run_id = %(run_id)s AND state = 'discarded'

-- name: step_list_expired_waits
-- Wait scanner: waiting child and wait_signal nodes past wait_until.
-- %(now)s pins the clock (tests; NULL: the database's now()).
SELECT run_id, node, type, signal, child_run_id,
       extract(epoch FROM wait_until - started_at)::float8 AS waited_s
FROM {schema}.cyclone_steps
WHERE state = 'waiting' AND wait_until IS NOT NULL
  AND wait_until <= coalesce(%(now)s::timestamptz, now())
ORDER BY wait_until
LIMIT %(batch)s

-- name: step_list_reclaim_exhausted
-- Recovery sweep: expired leases of steps already reclaimed max_reclaims times.
-- %(now)s pins the clock (tests; NULL: the database's now()).
SELECT id, run_id, node, lease_generation
FROM {schema}.cyclone_steps
WHERE state = 'running' AND lease_expiry < coalesce(%(now)s::timestamptz, now())
  AND %(max_reclaims)s::int > 0 AND reclaims >= %(max_reclaims)s::int
ORDER BY lease_expiry
LIMIT %(batch)s

-- name: step_list_reclaimed
-- Unfinished steps reclaimed more than %(min_reclaims)s times, most reclaims first (at
-- most %(limit)s): the dashboard's warning about steps whose workers keep dying. The
-- running ones on cyclone_steps_running_idx; the available ones among the first %(head)s of
-- each queue's claim order on cyclone_steps_claim_idx (the steps nobody owns; its queues
-- found by a loose index scan): the sweep keeps a reclaimed step's scheduled_at, so it
-- waits at the head of its queue, and a backlog's every available step is never read.
WITH RECURSIVE queues AS (
    (SELECT queue FROM {schema}.cyclone_steps WHERE state = 'available' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT s.queue FROM {schema}.cyclone_steps s
            WHERE s.state = 'available' AND s.queue > q.queue ORDER BY s.queue LIMIT 1)
    FROM queues q
    WHERE q.queue IS NOT NULL
)
SELECT run_id, node, item_index, state, reclaims
FROM (SELECT h.id, h.run_id, h.node, h.item_index, h.state, h.reclaims
      FROM queues q
      CROSS JOIN LATERAL (
          SELECT id, run_id, node, item_index, state, reclaims FROM {schema}.cyclone_steps
          WHERE state = 'available' AND queue = q.queue AND coalesce(claim_owner, '') = ''
          ORDER BY priority, scheduled_at, id
          LIMIT %(head)s) h
      WHERE h.reclaims > %(min_reclaims)s
      UNION ALL
      SELECT id, run_id, node, item_index, state, reclaims FROM {schema}.cyclone_steps
      WHERE state = 'running' AND reclaims > %(min_reclaims)s) s
ORDER BY reclaims DESC, id
LIMIT %(limit)s

-- name: step_list_timed_out
-- Recovery sweep: running steps past started_at + timeout, even with a fresh lease.
-- %(now)s pins the clock (tests; NULL: the database's now()).
SELECT id, run_id, node, lease_generation
FROM {schema}.cyclone_steps
WHERE state = 'running' AND timeout IS NOT NULL
  AND started_at + timeout <= coalesce(%(now)s::timestamptz, now())
ORDER BY started_at
LIMIT %(batch)s

-- name: step_release_dependents_if_ready
-- After completions: the dependents of each completed (%(run_ids)s[i], %(nodes)s[i]) whose
-- every dependency completed (or was skipped: a dependent still pending after a skip has
-- on_dep_skip run), pending -> available (actions) or waiting (the engine starts the
-- others in the same transaction); one node, or every node of a group commit. Runs
-- under the run row locks, so two fan-in completions cannot both miss each other. Returns
-- each released step's run, queue, node, type and when: condition (NULL: none; the
-- engine decides it in the same transaction, so it is decided once).
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN s.type = 'action' THEN 'available' ELSE 'waiting' END,
    scheduled_at = greatest(s.scheduled_at, statement_timestamp()),
    started_at = CASE WHEN s.type = 'action' THEN s.started_at ELSE statement_timestamp() END
FROM (SELECT DISTINCT d.run_id, d.node
      FROM unnest(%(run_ids)s::uuid[], %(nodes)s::text[]) AS c(run_id, node)
      -- LATERAL: one index lookup per completed node, never a scan of cyclone_deps
      CROSS JOIN LATERAL (SELECT x.run_id, x.node FROM {schema}.cyclone_deps x
                          WHERE x.run_id = c.run_id AND x.depends_on = c.node) d) t
WHERE s.run_id = t.run_id AND s.node = t.node
  AND s.state = 'pending'
  AND s.parent_node IS NULL
  AND NOT EXISTS (
      SELECT 1
      FROM {schema}.cyclone_deps d
      JOIN {schema}.cyclone_steps u ON u.run_id = d.run_id AND u.node = d.depends_on
      WHERE d.run_id = s.run_id AND d.node = s.node AND u.state NOT IN ('completed', 'skipped'))
RETURNING s.run_id, s.queue, s.node, s.type, s.condition

-- name: step_release_items_if_room
-- pending -> available for the next items of a waiting fan-out node, in item order, while
-- it has room: until max_parallel items are available or running (all of them without
-- max_parallel). Each item's terminal transition calls it, so max_parallel holds across
-- every worker without touching the claim.
UPDATE {schema}.cyclone_steps s
SET state = 'available', scheduled_at = greatest(s.scheduled_at, statement_timestamp())
WHERE s.id IN (
        SELECT i.id FROM {schema}.cyclone_steps i
        WHERE i.run_id = %(run_id)s AND i.parent_node = %(node)s AND i.state = 'pending'
        ORDER BY i.item_index
        LIMIT coalesce((
            SELECT CASE WHEN p.max_parallel IS NULL THEN 2147483647
                        ELSE greatest(0, p.max_parallel - (
                            SELECT count(*) FROM {schema}.cyclone_steps a
                            WHERE a.run_id = p.run_id AND a.parent_node = p.node
                              AND a.state IN ('available', 'running'))) END
            FROM {schema}.cyclone_steps p
            WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'), 0))
  AND s.state = 'pending'
RETURNING s.queue

-- name: step_release_lease_if_held_many
-- Graceful shutdown: this client's unfinished steps running -> available at once (lease
-- cleared, no attempt and no reclaim charged), each guarded by its lease_generation.
UPDATE {schema}.cyclone_steps s
SET state = 'available', lease_owner = NULL, lease_expiry = NULL, heartbeat_at = NULL
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[]) AS h(id, generation)
WHERE s.id = h.id AND s.state = 'running' AND s.lease_owner = %(owner)s
  AND s.lease_generation = h.generation
RETURNING s.queue

-- name: step_release_if_ready
-- pending -> available (action nodes) or waiting (fan_out, child and wait_signal nodes,
-- which the engine starts in the same transaction) for every step of run %(run_id)s whose
-- every dependency completed or was skipped: after a submit, the release of a held run of
-- a sequence, or an operator retry (the dependents of completed nodes:
-- step_release_dependents_if_ready). Returns the released steps' when: conditions too.
-- A later scheduled_at (a delayed run) is kept. Fan-out items are released by
-- step_release_items_if_room instead.
UPDATE {schema}.cyclone_steps s
SET state = CASE WHEN s.type = 'action' THEN 'available' ELSE 'waiting' END,
    scheduled_at = greatest(s.scheduled_at, statement_timestamp()),
    started_at = CASE WHEN s.type = 'action' THEN s.started_at ELSE statement_timestamp() END
WHERE s.run_id = %(run_id)s
  AND s.state = 'pending'
  AND s.parent_node IS NULL
  AND NOT EXISTS (
      SELECT 1
      FROM {schema}.cyclone_deps d
      JOIN {schema}.cyclone_steps u ON u.run_id = d.run_id AND u.node = d.depends_on
      WHERE d.run_id = %(run_id)s AND d.node = s.node AND u.state NOT IN ('completed', 'skipped'))
RETURNING s.run_id, s.queue, s.node, s.type, s.condition

-- name: step_rescue_if_lease_expired
-- Recovery sweep: running steps whose lease expired (and whose timeout has not passed) ->
-- available, lease cleared, reclaims + 1, no attempt charged, scheduled_at untouched
-- (Engine Design: Leases and Heartbeats). Steps that reached max_reclaims are left to
-- step_list_reclaim_exhausted. The ids are chosen once, in a MATERIALIZED CTE, so at most
-- %(batch)s rows change whatever the plan (an IN (subquery) can be planned as a join that
-- runs the FOR UPDATE SKIP LOCKED LIMIT again per outer row: without statistics on the
-- table it then changed every expired lease at once).
-- %(now)s pins the clock (tests; NULL: the database's now()).
WITH expired AS MATERIALIZED (
    SELECT id FROM {schema}.cyclone_steps
    WHERE state = 'running' AND lease_expiry < coalesce(%(now)s::timestamptz, now())
      AND (timeout IS NULL OR started_at + timeout > coalesce(%(now)s::timestamptz, now()))
      AND (%(max_reclaims)s::int = 0 OR reclaims < %(max_reclaims)s::int)
    ORDER BY lease_expiry
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.cyclone_steps s
SET state = 'available', lease_owner = NULL, lease_expiry = NULL, heartbeat_at = NULL,
    reclaims = s.reclaims + 1
FROM expired e
WHERE s.id = e.id
  AND s.state = 'running'
  AND s.lease_expiry < coalesce(%(now)s::timestamptz, now())
RETURNING s.id, s.run_id, s.node, s.queue, s.reclaims

-- name: step_reset_if_discarded_or_cancelled
-- Operator retry: discarded steps (all, or only %(node)s and its fan-out items) and every
-- cancelled step of the run -> pending with attempts and reclaims reset;
-- step_release_if_ready then releases those whose dependencies completed (a fan-out node
-- releases its reset items again; a child node starts a new child run). The per-attempt
-- error history is kept.
UPDATE {schema}.cyclone_steps
SET state = 'pending', attempt = 1, reclaims = 0, error = NULL, error_kind = NULL,
    finished_at = NULL, lease_owner = NULL, lease_expiry = NULL, heartbeat_at = NULL,
    started_at = NULL, output = NULL, scheduled_at = statement_timestamp(),
    wait_until = NULL, child_run_id = NULL, import_wait_since = NULL,
    import_wait_reason = NULL
WHERE run_id = %(run_id)s
  AND (state = 'cancelled'
       OR (state = 'discarded'
           AND (%(node)s::text IS NULL OR node = %(node)s OR parent_node = %(node)s)))
RETURNING node, parent_node

-- name: step_skip_if_released
-- A released node whose when: condition was false: available or waiting -> skipped (never
-- claimed, never started), with the condition as evaluated in skip_reason, in the
-- transaction that released it. Returns the node's queue.
UPDATE {schema}.cyclone_steps
SET state = 'skipped', finished_at = statement_timestamp(),
    skip_reason = %(reason)s::jsonb
WHERE run_id = %(run_id)s AND node = %(node)s AND state IN ('available', 'waiting')
  AND parent_node IS NULL
RETURNING queue

-- name: step_skip_dependents_if_pending
-- Skip-cascade after the nodes %(nodes)s of run %(run_id)s were skipped: every pending
-- descendant reached through dependents whose on_dep_skip is skip (NULL: the default)
-- -> skipped, skip_reason {"upstream": the skipped dependency}; a dependent with
-- on_dep_skip run stops the cascade (it is released once its dependencies are done).
-- Returns each node skipped and its queue.
WITH RECURSIVE down(node, via) AS (
    SELECT d.node, d.depends_on
    FROM {schema}.cyclone_deps d
    JOIN {schema}.cyclone_steps s ON s.run_id = d.run_id AND s.node = d.node
    WHERE d.run_id = %(run_id)s AND d.depends_on = ANY(%(nodes)s::text[])
      AND s.state = 'pending' AND coalesce(s.on_dep_skip, 'skip') = 'skip'
    UNION
    SELECT d.node, d.depends_on
    FROM down w
    JOIN {schema}.cyclone_deps d ON d.run_id = %(run_id)s AND d.depends_on = w.node
    JOIN {schema}.cyclone_steps s ON s.run_id = d.run_id AND s.node = d.node
    WHERE s.state = 'pending' AND coalesce(s.on_dep_skip, 'skip') = 'skip'
)
UPDATE {schema}.cyclone_steps s
SET state = 'skipped', finished_at = statement_timestamp(),
    skip_reason = jsonb_build_object('upstream', w.via)
FROM (SELECT DISTINCT ON (node) node, via FROM down ORDER BY node, via) w
WHERE s.run_id = %(run_id)s AND s.node = w.node AND s.state = 'pending'
  AND s.parent_node IS NULL
RETURNING s.node, s.queue

-- name: step_reuse_from_run
-- A rerun, just inserted with every step pending (step_insert_plan with hold): each step
-- takes the queue and priority of its node in run %(source)s (a queue override of the
-- original submission is kept), and the nodes %(nodes)s take over its result without
-- running: completed with its output (a fan-out node with its item counts, a child node
-- with its child run) or skipped with its skip_reason, reused_from = the source step.
UPDATE {schema}.cyclone_steps s
SET queue = o.queue, priority = o.priority,
    state = CASE WHEN r.reused THEN o.state ELSE s.state END,
    output = CASE WHEN r.reused THEN o.output END,
    finished_at = CASE WHEN r.reused THEN statement_timestamp() END,
    skip_reason = CASE WHEN r.reused THEN o.skip_reason END,
    items_total = CASE WHEN r.reused THEN o.items_total END,
    items_done = CASE WHEN r.reused THEN o.items_done END,
    child_run_id = CASE WHEN r.reused THEN o.child_run_id END,
    reused_from = CASE WHEN r.reused THEN o.id END
FROM {schema}.cyclone_steps o,
     LATERAL (SELECT o.node = ANY(%(nodes)s::text[]) AS reused) r
WHERE s.run_id = %(run_id)s AND o.run_id = %(source)s AND o.node = s.node
  AND s.parent_node IS NULL AND o.parent_node IS NULL AND s.state = 'pending'
  AND (NOT r.reused OR o.state IN ('completed', 'skipped'))
RETURNING s.node, s.state

-- name: step_insert_reused_items
-- A rerun: the completed items of the reused fan-out nodes %(nodes)s of run %(source)s,
-- copied into run %(run_id)s as completed with reused_from = the source item (the items
-- page shows them; nothing runs).
INSERT INTO {schema}.cyclone_steps
    (run_id, node, type, call, state, queue, priority, max_attempts, backoff, timeout,
     input, parent_node, item_index, item, output, scheduled_at, finished_at, reused_from)
SELECT %(run_id)s, o.node, o.type, o.call, 'completed', o.queue, o.priority, o.max_attempts,
       o.backoff, o.timeout, o.input, o.parent_node, o.item_index, o.item, o.output,
       statement_timestamp(), statement_timestamp(), o.id
FROM {schema}.cyclone_steps o
WHERE o.run_id = %(source)s AND o.parent_node = ANY(%(nodes)s::text[])
  AND o.state = 'completed'
ORDER BY o.parent_node, o.item_index

-- name: step_set_child_run_if_waiting
-- Record the child run a waiting child node started.
UPDATE {schema}.cyclone_steps
SET child_run_id = %(child_run_id)s
WHERE run_id = %(run_id)s AND node = %(node)s AND state = 'waiting'

-- name: step_set_items_total_if_waiting
-- Record a started fan-out node's item count and how many of its items completed already
-- (zero, unless an operator retry expands it again).
UPDATE {schema}.cyclone_steps p
SET items_total = %(total)s,
    items_done = (SELECT count(*) FROM {schema}.cyclone_steps i
                  WHERE i.run_id = p.run_id AND i.parent_node = p.node
                    AND i.state = 'completed')
WHERE p.run_id = %(run_id)s AND p.node = %(node)s AND p.state = 'waiting'
RETURNING p.items_done, p.items_total

-- name: step_set_wait_until_if_waiting
-- A child or wait_signal node starts waiting: wait_until = now() (or the start of a
-- delayed run, when later) + max_wait, where a wait_signal node without max_wait takes the
-- max_signal_wait of the client that submitted the run (Client Options: WithMaxSignalWait);
-- NULL waits without a bound.
UPDATE {schema}.cyclone_steps s
SET wait_until = greatest(s.scheduled_at, statement_timestamp())
        + coalesce(s.max_wait, CASE WHEN s.type = 'wait_signal' THEN r.max_signal_wait END)
FROM {schema}.cyclone_runs r
WHERE r.id = s.run_id AND s.run_id = %(run_id)s AND s.node = %(node)s AND s.state = 'waiting'
RETURNING s.wait_until

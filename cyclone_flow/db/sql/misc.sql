-- No table: notifications (LISTEN/NOTIFY), the database clock and session settings.

-- name: notify_listen
-- Subscribe the listener's connection to both wakeup channels, cyclone_available and
-- cyclone_run_done (Engine Design: LISTEN/NOTIFY and the Polling Floor).
LISTEN cyclone_available;
LISTEN cyclone_run_done

-- name: notify_publish
-- Publish a batch of wakeups, one pg_notify per (channel, payload) pair, after the commit
-- that produced them (never inside a core transaction; Engine Design: LISTEN/NOTIFY and
-- the Polling Floor).
SELECT pg_notify(n.channel, n.payload)
FROM unnest(%(channels)s::text[], %(payloads)s::text[]) AS n(channel, payload)

-- name: notify_unlisten
-- Unsubscribe a listener's connection before it goes back to the pool.
UNLISTEN *

-- name: notify_ping
-- The listener's liveness check: a LISTEN connection that answers no query is replaced.
SELECT 1

-- name: pg_now
-- The database clock, or the instant a test pins (River: coalesce(@now, now())).
SELECT coalesce(%(now)s::timestamptz, now())

-- name: session_force_generic_plans
-- Sent first in a completion's pipeline: for the rest of that transaction, prepared
-- statements run their generic plan. With array parameters (run_complete_if_done,
-- step_release_dependents, the group commit's statements) Postgres otherwise keeps
-- planning each call anew (the generic plan's estimate for an array of unknown length is
-- higher), which costs 0.5-1 ms per call, several times the statement itself. Only the
-- engine's statements follow it: a handler's own writes in ctx.completion_tx() came before.
SET LOCAL plan_cache_mode = force_generic_plan

-- No table: notifications (LISTEN/NOTIFY) of the wakeup channels.

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

-- name: notify_ping
-- The listener's liveness check: a LISTEN connection that answers no query is replaced.
SELECT 1

-- name: notify_publish
-- Publish one wakeup after the commit that produced it (never inside a core transaction;
-- Engine Design: LISTEN/NOTIFY and the Polling Floor).
SELECT pg_notify(%(channel)s, %(payload)s)

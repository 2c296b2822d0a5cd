-- name: step_queue_stats
-- Observability (worker --metrics-port): per queue, the steps claimable now (the depth),
-- those available later (backoff), those running, and the age in seconds of the oldest
-- claimable one, all by the database's now().
SELECT queue,
       count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()) AS available,
       count(*) FILTER (WHERE state = 'available' AND scheduled_at > now()) AS scheduled,
       count(*) FILTER (WHERE state = 'running') AS running,
       coalesce(extract(epoch FROM now() - min(scheduled_at)
                FILTER (WHERE state = 'available' AND scheduled_at <= now())), 0)::float8
           AS oldest_available_s
FROM {schema}.cyclone_steps
WHERE state IN ('available', 'running')
GROUP BY queue
ORDER BY queue

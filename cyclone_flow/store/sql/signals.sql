-- Signals and the wait_signal nodes that consume them (Client Options: WithMaxSignalWait,
-- WithPayloadLimits). Every statement runs under the run row lock.

-- name: signal_room
-- For a run and signal name: how many wait_signal nodes still await it (pending or
-- waiting) and how many signals of that name are stored unconsumed.
SELECT
    (SELECT count(*) FROM {schema}.cyclone_steps
     WHERE run_id = %(run_id)s AND type = 'wait_signal' AND signal = %(name)s
       AND state IN ('pending', 'waiting')) AS awaiting,
    (SELECT count(*) FROM {schema}.cyclone_signals
     WHERE run_id = %(run_id)s AND name = %(name)s AND consumed_at IS NULL) AS stored

-- name: signal_insert
-- Keep a signal for its run until a wait_signal node consumes it.
INSERT INTO {schema}.cyclone_signals (run_id, name, payload)
VALUES (%(run_id)s, %(name)s, %(payload)s)
RETURNING id

-- name: signal_consume
-- The oldest unconsumed signal %(name)s of the run -> consumed by %(node)s; returns its
-- payload as JSON text (none: the node keeps waiting).
UPDATE {schema}.cyclone_signals
SET consumed_at = statement_timestamp(), consumed_by = %(node)s
WHERE id = (SELECT id FROM {schema}.cyclone_signals
            WHERE run_id = %(run_id)s AND name = %(name)s AND consumed_at IS NULL
            ORDER BY id LIMIT 1)
  AND consumed_at IS NULL
RETURNING payload::text

-- name: step_find_signal_waiter
-- The first waiting wait_signal node of a run that awaits signal %(name)s.
SELECT node FROM {schema}.cyclone_steps
WHERE run_id = %(run_id)s AND type = 'wait_signal' AND signal = %(name)s AND state = 'waiting'
ORDER BY id
LIMIT 1

-- Table cyclone_signals: signals delivered to a run, kept until a wait_signal node
-- consumes them (Client Options: WithMaxSignalWait, WithPayloadLimits). Defined by
-- migration 0002_node_types. Every statement runs under the run row lock.

-- name: signal_consume_if_unconsumed
-- The oldest unconsumed signal %(name)s of the run -> consumed by %(node)s; returns its
-- payload as JSON text (none: the node keeps waiting).
UPDATE {schema}.cyclone_signals
SET consumed_at = statement_timestamp(), consumed_by = %(node)s
WHERE id = (SELECT id FROM {schema}.cyclone_signals
            WHERE run_id = %(run_id)s AND name = %(name)s AND consumed_at IS NULL
            ORDER BY id LIMIT 1)
  AND consumed_at IS NULL
RETURNING payload::text

-- name: signal_count_awaiting
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

-- Table cyclone_sequences: one row per sequence key; its row lock serialises the submits
-- and releases of that sequence, and last_pos hands out positions in submission order
-- (Sequences). Defined by migration 0003_queue_features.

-- name: sequence_lock
-- Take the sequence's row lock (release of the next run after a run completed or was
-- cancelled; taken after the run row lock, like every path).
SELECT last_pos FROM {schema}.cyclone_sequences WHERE key = %(key)s FOR UPDATE

-- name: sequence_take_next_pos
-- Take the sequence's row lock for the rest of the transaction and hand out the next
-- position (submission order; Sequences).
INSERT INTO {schema}.cyclone_sequences AS q (key, last_pos)
VALUES (%(key)s, 1)
ON CONFLICT (key) DO UPDATE SET last_pos = q.last_pos + 1
RETURNING last_pos

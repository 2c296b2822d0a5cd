-- Table cyclone_step_logs: the lines a handler logged and printed during one attempt,
-- written while it runs (a worker process's flusher, about every second) and at its end;
-- deleted with their run (ON DELETE CASCADE). Defined by migration 0006_step_logs.

-- name: step_log_insert_many
-- The lines of one attempt (a claim's generation), in one statement over arrays.
INSERT INTO {schema}.cyclone_step_logs
    (run_id, node, attempt, generation, seq, at, stream, level, message)
SELECT %(run_id)s::uuid, %(node)s, %(attempt)s, %(generation)s, l.seq, l.at, l.stream,
       l.level, l.message
FROM unnest(%(seqs)s::int[], %(ats)s::timestamptz[], %(streams)s::text[],
            %(levels)s::text[], %(messages)s::text[]) AS l(seq, at, stream, level, message)

-- name: step_log_insert_batch
-- The lines of several attempts at once (the flusher's batch), in one statement over
-- arrays: a row's run, node, attempt and generation are array elements too.
INSERT INTO {schema}.cyclone_step_logs
    (run_id, node, attempt, generation, seq, at, stream, level, message)
SELECT l.run_id, l.node, l.attempt, l.generation, l.seq, l.at, l.stream, l.level, l.message
FROM unnest(%(run_ids)s::uuid[], %(nodes)s::text[], %(attempts)s::int[],
            %(generations)s::bigint[], %(seqs)s::int[], %(ats)s::timestamptz[],
            %(streams)s::text[], %(levels)s::text[], %(messages)s::text[])
     AS l(run_id, node, attempt, generation, seq, at, stream, level, message)

-- name: step_log_list
-- A run's lines after id %(after)s in write order, of node %(node)s (NULL: every node; a
-- fan-out node's name also matches its items) and attempt %(attempt)s (NULL: every one).
SELECT id, node, attempt, generation, seq, at, stream, level, message
FROM {schema}.cyclone_step_logs
WHERE run_id = %(run_id)s AND id > %(after)s
  AND (%(node)s::text IS NULL OR node = %(node)s
       OR left(node, length(%(node)s) + 1) = %(node)s || '[')
  AND (%(attempt)s::int IS NULL OR attempt = %(attempt)s)
ORDER BY id
LIMIT %(limit)s

-- name: step_log_list_tail
-- The last %(limit)s lines of a run (status), newest first by when they were produced
-- (a failed attempt's lines can be written after the next attempt's: its retry may be
-- claimed and run before they are stored), then by insertion.
SELECT id, node, attempt, generation, seq, at, stream, level, message
FROM {schema}.cyclone_step_logs
WHERE run_id = %(run_id)s
ORDER BY at DESC, id DESC
LIMIT %(limit)s

-- name: step_log_list_node_tail
-- The last %(limit)s lines of node %(node)s of a run (a fan-out node's name also matches
-- its items; the step page), newest first by id (write order): the caller reverses them.
SELECT id, node, attempt, generation, seq, at, stream, level, message
FROM {schema}.cyclone_step_logs
WHERE run_id = %(run_id)s
  AND (node = %(node)s OR left(node, length(%(node)s) + 1) = %(node)s || '[')
ORDER BY id DESC
LIMIT %(limit)s

-- name: step_log_count_node
-- How many lines node %(node)s of a run has (its fan-out items' too).
SELECT count(*)::bigint AS lines
FROM {schema}.cyclone_step_logs
WHERE run_id = %(run_id)s
  AND (node = %(node)s OR left(node, length(%(node)s) + 1) = %(node)s || '[')

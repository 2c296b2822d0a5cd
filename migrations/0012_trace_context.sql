-- 0012_trace_context: the W3C trace context (a `traceparent` header value,
-- "00-<trace id>-<span id>-<flags>") of the call that submitted a run, so that every step
-- of the run, in whatever worker process, continues the submitter's trace (issue 21,
-- docs/observability.md). cyclone_runs keeps it for the run (child runs copy their
-- parent's); cyclone_steps keeps a copy on each step row, written with the step, so the
-- claim returns it with the step it claims and never reads the run row for it. Both are
-- NULL for a run submitted without an active trace (the library without the `otel` extra,
-- or no span current): a NULL costs no space beside the other nullable columns, and
-- adding a nullable column without a default rewrites nothing. Applied with search_path
-- set to the target schema; safe to apply twice.

ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE cyclone_steps ADD COLUMN IF NOT EXISTS traceparent text;

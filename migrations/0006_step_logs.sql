-- 0006_step_logs: what a handler logged and printed, per attempt (issue 18: step logs):
-- its ctx.log and logging records and its stdout/stderr lines, up to the client's
-- step_log_bytes per attempt (a last row marks a cut), written right after the attempt's
-- completion or failure is recorded (a crash loses that attempt's lines). Deleted with
-- the run (ON DELETE CASCADE: purge and the retention sweep). Applied with search_path set
-- to the target schema; safe to apply twice.

CREATE TABLE IF NOT EXISTS cyclone_step_logs (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     uuid        NOT NULL REFERENCES cyclone_runs (id) ON DELETE CASCADE,
    node       text        NOT NULL,
    attempt    integer     NOT NULL,
    -- the claim's lease generation: two executions of one attempt (a lost lease) apart
    generation bigint      NOT NULL,
    seq        integer     NOT NULL,
    at         timestamptz NOT NULL,
    stream     text        NOT NULL,
    level      text,
    message    text        NOT NULL,
    CONSTRAINT cyclone_step_logs_stream_check CHECK (stream IN ('log', 'stdout', 'stderr'))
);

-- `cyclone-flow logs RUN [--node N] [--attempt K] [--follow]` reads a run's rows by id
CREATE INDEX IF NOT EXISTS cyclone_step_logs_run_idx ON cyclone_step_logs (run_id, id);

-- 0016_flow_revisions: flows deployed from version control as revisions (docs/deploy.md).
--
-- cyclone_flow_revisions: one row per deployed revision of a flow name. `revision` counts
-- from 1 per name and only grows (deploy and rollback take max + 1 under the deploy lock);
-- `source` is the flow file's text exactly as read (comments kept), `workflow_id` the
-- content-addressed definition it compiles to (cyclone_workflows, shared with submits of
-- the same content). `kind` 'rollback' rows repeat an older revision's source and
-- definition (`rollback_of`). `deployed_by` is --by or the OS user; the git columns are
-- NULL when the file was not in a git work tree.
--
-- cyclone_flows: one row per deployed flow name: its current revision (what `submit NAME`
-- runs and what its schedules use) and whether it is retired (new submits by name are
-- refused, its schedules paused; running runs finish).
--
-- cyclone_runs.revision / cyclone_schedules.revision: the revision a run was submitted
-- with (NULL: submitted from a file or the API with a Flow), the revision a schedule's
-- definition comes from (NULL: added from a file). Nullable without a default: adding
-- them rewrites nothing. Applied with search_path set to the target schema; safe to apply
-- twice.

CREATE TABLE IF NOT EXISTS cyclone_flow_revisions (
    flow_name    text        NOT NULL,
    revision     integer     NOT NULL,
    workflow_id  bigint      NOT NULL REFERENCES cyclone_workflows (id),
    source       text        NOT NULL,
    source_path  text,
    kind         text        NOT NULL DEFAULT 'deploy',
    rollback_of  integer,
    deployed_at  timestamptz NOT NULL DEFAULT now(),
    deployed_by  text        NOT NULL,
    git_commit   text,
    git_path     text,
    git_dirty    boolean,
    CONSTRAINT cyclone_flow_revisions_pkey PRIMARY KEY (flow_name, revision),
    CONSTRAINT cyclone_flow_revisions_revision_check CHECK (revision > 0),
    CONSTRAINT cyclone_flow_revisions_kind_check CHECK (kind IN ('deploy', 'rollback')),
    -- a rollback names the revision it restores, a deploy none
    CONSTRAINT cyclone_flow_revisions_rollback_check
        CHECK ((kind = 'rollback') = (rollback_of IS NOT NULL)),
    -- the git columns are all set or all NULL
    CONSTRAINT cyclone_flow_revisions_git_check
        CHECK ((git_commit IS NULL) = (git_path IS NULL)
               AND (git_commit IS NULL) = (git_dirty IS NULL))
);

CREATE TABLE IF NOT EXISTS cyclone_flows (
    name              text        PRIMARY KEY,
    current_revision  integer     NOT NULL,
    retired_at        timestamptz,
    retired_by        text,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cyclone_flows_current_fkey FOREIGN KEY (name, current_revision)
        REFERENCES cyclone_flow_revisions (flow_name, revision),
    -- retired <=> who retired it is known
    CONSTRAINT cyclone_flows_retired_check CHECK ((retired_at IS NULL) = (retired_by IS NULL))
);

ALTER TABLE cyclone_runs ADD COLUMN IF NOT EXISTS revision integer;

-- The runs of one revision (flows history's counts, runs --flow F --revision N, the flow
-- page): only runs submitted by name are in it, so submits from files and jobs write no
-- entry, and the column is never updated (run updates stay HOT).
CREATE INDEX IF NOT EXISTS cyclone_runs_revision_idx
    ON cyclone_runs (flow_name, revision, created_at DESC) WHERE revision IS NOT NULL;
ALTER TABLE cyclone_schedules ADD COLUMN IF NOT EXISTS revision integer;

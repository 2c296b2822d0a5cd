-- 0013_limit_keys_sliding_rates: the flow-control keys rendered by one function, and rate
-- limits counted over a sliding window instead of fixed windows (issue 20,
-- docs/flow-control.md "Rate limits"). Applied with search_path set to the target schema;
-- safe to apply twice.

-- The key a limit counts under (step_insert_plan renders it at submit,
-- step_render_limits_if_available once an upstream output it refers to exists): the
-- limit's group, then '/' and the value at the key's path in the upstream output (the
-- plan's limit has a node) or in the run input (it has a path), or its literal value;
-- 'GROUP/null' when the path leads nowhere; the group alone for a limit without a key;
-- NULL when spec is NULL (no such limit). spec is a limit of the compiled plan
-- (flowfile/plan.py: group, limit, per_s, and node + path, path or value). The path's
-- keys are letters, digits, '_' and '-' (flowfile/template.py), so the text of its JSON
-- array is an array literal once its brackets are braces: the body is one expression
-- without a sub-select, which the planner inlines into the calling statement (the
-- arguments are then evaluated only where the expression uses them).
CREATE OR REPLACE FUNCTION cyclone_limit_key(spec jsonb, run_input jsonb, upstream_output jsonb)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT (spec->>'group') || CASE
        WHEN spec ? 'node' OR spec ? 'path'
            THEN '/' || coalesce(
                CASE WHEN spec ? 'node' THEN upstream_output ELSE run_input END
                    #>> coalesce(translate(spec->>'path', '[]', '{}')::text[], '{}'),
                'null')
        WHEN spec ? 'value' THEN '/' || (spec->>'value')
        ELSE '' END
$$;

-- A rate key's claims as a sliding log: bucket_ends[i] is the end of a bucket of the
-- grid of rate_per / 64 from the epoch, bucket_claims[i] the claims made in it (ordered
-- by end; each claim is counted as made at its bucket's end, never earlier than it was
-- made). A bucket counts while its end is after now - per: a claim is admitted when the
-- counted claims plus it are at most the limit, so no interval of length per holds more
-- than limit claims (docs/flow-control.md). rate_per: the window of the last claim
-- (the retention of an idle row: rate_window_delete_if_idle).
ALTER TABLE cyclone_rate_windows ADD COLUMN IF NOT EXISTS rate_per interval;
ALTER TABLE cyclone_rate_windows ADD COLUMN IF NOT EXISTS bucket_ends timestamptz[];
ALTER TABLE cyclone_rate_windows ADD COLUMN IF NOT EXISTS bucket_claims integer[];

-- The fixed windows of 0011 (window_start, claims) become logs of one bucket: the claims
-- of a window are counted as made at the window's end, or now if it has not ended (never
-- earlier than they were made: the limit holds across the upgrade), under the longest
-- rate_per the key's steps declare; the row of a key no step has any more is dropped.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass('cyclone_rate_windows')
                 AND attname = 'window_start' AND NOT attisdropped) THEN
        IF EXISTS (SELECT 1 FROM cyclone_rate_windows) THEN
            UPDATE cyclone_rate_windows rw
            SET rate_per = k.per,
                bucket_ends = ARRAY[least(now(), rw.window_start + k.per)],
                bucket_claims = ARRAY[rw.claims]
            FROM (SELECT s.rate_key, max(s.rate_per) AS per
                  FROM cyclone_steps s
                  WHERE s.rate_key IN (SELECT rate_key FROM cyclone_rate_windows)
                  GROUP BY s.rate_key) k
            WHERE k.rate_key = rw.rate_key;
            DELETE FROM cyclone_rate_windows WHERE bucket_ends IS NULL;
        END IF;
        ALTER TABLE cyclone_rate_windows DROP COLUMN window_start, DROP COLUMN claims;
    END IF;
END $$;

ALTER TABLE cyclone_rate_windows ALTER COLUMN rate_per SET NOT NULL,
    ALTER COLUMN bucket_ends SET NOT NULL, ALTER COLUMN bucket_claims SET NOT NULL;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'cyclone_rate_windows_log_check'
                     AND conrelid = to_regclass('cyclone_rate_windows')) THEN
        ALTER TABLE cyclone_rate_windows ADD CONSTRAINT cyclone_rate_windows_log_check CHECK
            (cardinality(bucket_ends) = cardinality(bucket_claims)
             AND cardinality(bucket_ends) >= 1 AND rate_per > interval '0');
    END IF;
END $$;

-- The log of a rate key after n claims at claimed_at under the window per: the buckets
-- of (ends, claims) still counted then (end > claimed_at - per), and the n claims added to
-- the bucket of the grid of per / 64 from the epoch that holds claimed_at (counted at its
-- end), buckets of one end merged, in end order (at most 65 buckets: the row stays
-- small). ends and claims NULL: a key's first claims. Written by
-- step_claim_limited_if_available, in its statement.
CREATE OR REPLACE FUNCTION cyclone_rate_log_add(
    ends timestamptz[], claims integer[], per interval, claimed_at timestamptz, n integer,
    OUT new_ends timestamptz[], OUT new_claims integer[])
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH grid AS (SELECT greatest(per / 64, interval '1 microsecond') AS stride),
    counted AS (
        SELECT u.e, u.c FROM unnest(ends, claims) AS u(e, c) WHERE u.e > claimed_at - per
        UNION ALL
        SELECT date_bin(grid.stride, claimed_at, timestamptz 'epoch') + grid.stride, n
        FROM grid
    ), merged AS (
        SELECT e, sum(c)::int AS c FROM counted GROUP BY e
    )
    SELECT array_agg(e ORDER BY e), array_agg(c ORDER BY e) FROM merged
$$;

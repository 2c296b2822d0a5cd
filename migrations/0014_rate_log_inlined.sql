-- 0014_rate_log_inlined: cyclone_rate_log_next, the rule of 0013's cyclone_rate_log_add
-- unchanged, as a set-returning SQL function of one SELECT, so that the planner inlines it
-- into the limited claim's statement (an SQL function that returns one composite row, as
-- cyclone_rate_log_add does, is run by the function executor instead, its body planned
-- anew at each claim: about half a millisecond of every claim of a rate-limited step). The
-- limited claim calls it once per rate key, with the key's log as read by its statement.
-- cyclone_rate_log_add stays, unused by this version: the workers of the previous version
-- call it until they are upgraded, and a CREATE OR REPLACE cannot change its return type
-- (0013 applied again must still succeed). Applied with search_path set to the target
-- schema; safe to apply twice.

-- The log of a rate key after n claims at claimed_at under the window per: the buckets
-- of (ends, claims) still counted then (end > claimed_at - per), and the n claims added to
-- the bucket of the grid of per / 64 from the epoch that holds claimed_at (counted at its
-- end), buckets of one end merged, in end order (at most 65 buckets: the row stays
-- small). ends and claims NULL: a key's first claims. One row.
CREATE OR REPLACE FUNCTION cyclone_rate_log_next(
    ends timestamptz[], claims integer[], per interval, claimed_at timestamptz, n integer)
RETURNS TABLE (new_ends timestamptz[], new_claims integer[])
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT array_agg(m.e ORDER BY m.e), array_agg(m.c ORDER BY m.e)
    FROM (SELECT u.e, sum(u.c)::int AS c
          FROM (SELECT x.e, x.c
                FROM unnest(ends, claims) AS x(e, c)
                WHERE x.e > claimed_at - per
                UNION ALL
                SELECT date_bin(g.stride, claimed_at, timestamptz 'epoch') + g.stride, n
                FROM (SELECT greatest(per / 64, interval '1 microsecond') AS stride) g) u
          GROUP BY u.e) m
$$;

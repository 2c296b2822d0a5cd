-- Table cyclone_rate_windows: one row per rate key (migrations 0011_flow_control and
-- 0013_limit_keys_sliding_rates): the key's claims of its last window as a sliding log
-- (bucket_ends, bucket_claims: the claims of each bucket of rate_per / 64, counted at the
-- bucket's end; a bucket counts while its end is after now - rate_per). Written only by
-- step_claim_limited_if_available, in the claim's statement; deleted once idle.

-- name: rate_window_list
-- The logs of the rate keys %(keys)s ("why is it waiting": a rate key's next token).
SELECT rate_key, extract(epoch FROM rate_per)::float8 AS rate_per_s, bucket_ends,
       bucket_claims
FROM {schema}.cyclone_rate_windows
WHERE rate_key = ANY(%(keys)s::text[])
ORDER BY rate_key

-- name: rate_window_delete_if_idle
-- The rate window pruner: delete the rows of the keys idle for longer than their window
-- at now (the database clock, or a pinned instant): their last bucket (the latest end)
-- left the window, so the row counts no claim any more (a claim after it starts a new
-- row). A row a claim updated meanwhile is rechecked and kept. Returns their keys.
DELETE FROM {schema}.cyclone_rate_windows
WHERE bucket_ends[cardinality(bucket_ends)] + rate_per <= coalesce(%(now)s::timestamptz, now())
RETURNING rate_key

-- Table cyclone_rate_windows: one row per rate key (migration 0011_flow_control): the
-- claims counted in its current window (fixed windows of the key's rate_per from the
-- epoch, by the database clock). Written only by step_claim_limited_if_available, in
-- the claim's statement; a row of an older window counts nothing.

-- name: rate_window_list
-- The windows of the rate keys %(keys)s ("why is it waiting": a rate key's next token).
SELECT rate_key, window_start, claims
FROM {schema}.cyclone_rate_windows
WHERE rate_key = ANY(%(keys)s::text[])
ORDER BY rate_key

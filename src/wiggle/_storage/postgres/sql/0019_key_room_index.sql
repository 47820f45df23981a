-- expect_key_room (migration 0018) counted each key's RUNNING attempts with
-- "limit_key = p_keys[i]": under PL/pgSQL's generic plan that does not imply the partial index
-- tokens_limit_held's condition (limit_key <> ''), so every count scanned all RUNNING tokens.
-- The same check, one statement for all the keys, with the index's condition written out
-- (wiggle/_storage/postgres/claim_terms.py key_held says the same of the claim's statements).
CREATE OR REPLACE FUNCTION expect_key_room(p_keys text[], p_taken integer[], p_max integer[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    full_key text;
    running bigint;
    taken integer;
    most integer;
BEGIN
    SELECT u.k, r.n, u.taken, u.most INTO full_key, running, taken, most
    FROM unnest(p_keys, p_taken, p_max) AS u(k, taken, most)
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM tokens
        WHERE status = 'RUNNING' AND limit_key <> '' AND limit_key = u.k
    ) AS r
    WHERE r.n + u.taken > u.most
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'concurrency-limit key % has % attempt(s) running: no room for % more under its limit of %',
            full_key, running, taken, most
            USING ERRCODE = 'WG002';
    END IF;
    RETURN 1;
END
$$;

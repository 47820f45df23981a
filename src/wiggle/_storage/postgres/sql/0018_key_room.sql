-- A claim of steps under concurrency-limit keys (and no other limit that needs reading under a
-- lock) admits them on the RUNNING counts its candidate read returned, then confirms that in the
-- round trip of its writes: it takes the keys' advisory locks and calls expect_key_room, a
-- statement of its own whose snapshot follows the locks, so it sees every claim of those keys
-- committed before, on any server. If a key has less room than the claim took (another claim of
-- it committed between the read and the locks), the call raises SQLSTATE WG002, the transaction
-- rolls back before COMMIT, and the claim runs again reading the counts under the locks first
-- (wiggle/_storage/postgres/limits.py, "One round trip").
-- p_keys, p_taken, p_max: each key, how many steps of it the claim took, the key's limit.
CREATE FUNCTION expect_key_room(p_keys text[], p_taken integer[], p_max integer[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    running integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        SELECT count(*) INTO running FROM tokens WHERE status = 'RUNNING' AND limit_key = p_keys[i];
        IF running + p_taken[i] > p_max[i] THEN
            RAISE EXCEPTION 'concurrency-limit key % has % attempt(s) running: no room for % more under its limit of %',
                p_keys[i], running, p_taken[i], p_max[i]
                USING ERRCODE = 'WG002';
        END IF;
    END LOOP;
    RETURN 1;
END
$$;

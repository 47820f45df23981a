-- A claim admitted on its read's counts confirmed them with two statements: the keys' advisory
-- locks, then expect_key_room (migrations 0018, 0019). take_key_room does both in one: it takes
-- the locks itself, in the order every claim takes them (by hashtext of the key, ascending:
-- wiggle/_storage/postgres/statements.py lock_limit_keys), then checks each key's room as
-- expect_key_room does, in a statement of its own. A PL/pgSQL function is VOLATILE, so under READ
-- COMMITTED each of its statements takes a new snapshot: the check's follows the locks and sees
-- every claim of those keys committed before, on any server.
-- p_class: the schema's lock class for concurrency-limit keys (PostgresStore._limit_lock_class).
-- expect_key_room stays, for the servers of the previous version during a rolling upgrade.
CREATE FUNCTION take_key_room(p_class integer, p_keys text[], p_taken integer[], p_max integer[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    full_key text;
    running bigint;
    taken integer;
    most integer;
BEGIN
    PERFORM pg_advisory_xact_lock(p_class, locks.h)
    FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest(p_keys) AS u(k) ORDER BY 1) AS locks;
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

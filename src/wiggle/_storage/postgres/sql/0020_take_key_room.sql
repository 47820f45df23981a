-- A claim admitted on its read's counts confirmed them with two statements: the keys' advisory
-- locks, then expect_key_room (migrations 0018, 0019). take_key_room does both in one: it takes
-- the locks itself, in the order every claim takes them (by hashtext of the key, ascending:
-- wiggle/_storage/postgres/statements.py lock_limit_keys), then runs expect_key_room's check. A
-- PL/pgSQL function is VOLATILE, so under READ COMMITTED each of its statements takes a new
-- snapshot: the check's follows the locks and sees every claim of those keys committed before,
-- on any server; a key without room raises expect_key_room's WG002.
-- p_class: the schema's lock class for concurrency-limit keys (PostgresStore._limit_lock_class).
-- expect_key_room is also what the servers of the previous version call, during a rolling upgrade.
CREATE FUNCTION take_key_room(p_class integer, p_keys text[], p_taken integer[], p_max integer[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_class, locks.h)
    FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest(p_keys) AS u(k) ORDER BY 1) AS locks;
    RETURN expect_key_room(p_keys, p_taken, p_max);
END
$$;

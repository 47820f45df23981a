-- Starts without a database read for the latest version (issue #16): a node remembers the latest
-- version of each workflow it has seen, starts from it, and the start's own transaction calls
-- expect_latest(name, version) to confirm it. When another node (or this one) has registered a
-- newer version since, the call raises SQLSTATE WG001 and the transaction rolls back before
-- COMMIT; the node then reads the latest version and starts again from it
-- (wiggle/_storage/postgres/start_commit.py, wiggle/_server/instances.py start).
-- "Latest" is the order of the latest-version statement (statements.py latest_version).
-- search_path is fixed to this schema (the migration runs with it set), so the function reads this
-- schema's definitions whatever the caller's search_path.
CREATE FUNCTION expect_latest(p_name text, p_version text) RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    latest text;
BEGIN
    SELECT version INTO latest FROM definitions WHERE name = p_name
        ORDER BY registered_at DESC, seq DESC LIMIT 1;
    IF latest IS DISTINCT FROM p_version THEN
        RAISE EXCEPTION 'workflow % has a newer version than %', p_name, p_version
            USING ERRCODE = 'WG001';
    END IF;
    RETURN 1;
END
$$;

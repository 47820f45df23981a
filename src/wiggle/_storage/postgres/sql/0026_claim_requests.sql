-- A start that carries a request id (docs/semantics.md#idempotent-starts) and no deduplication key
-- is written in one statement, as a start without one is (wiggle/_storage/postgres/start_commit.py
-- ``_write_one``): this function, called by the statement's check before its rows are written,
-- claims the request ids for the new instances. When every id is claimed it returns how many;
-- when one is taken already (a repeated or a concurrent start: ON CONFLICT DO NOTHING waits for a
-- concurrent claim's commit first) it raises SQLSTATE WG004, the statement writes nothing, and the
-- server claims the ids again with a read in a transaction, where a taken id is answered with the
-- instance that holds it. The ids come sorted, so concurrent claims lock in one order.
CREATE FUNCTION claim_requests(p_requests text[], p_instances text[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    claimed integer;
BEGIN
    INSERT INTO start_requests (request_id, instance_id)
        SELECT * FROM unnest(p_requests, p_instances) ON CONFLICT (request_id) DO NOTHING;
    GET DIAGNOSTICS claimed = ROW_COUNT;
    IF claimed < cardinality(p_requests) THEN
        RAISE EXCEPTION '% of % start request ids are taken', cardinality(p_requests) - claimed,
            cardinality(p_requests) USING ERRCODE = 'WG004';
    END IF;
    RETURN claimed;
END
$$;

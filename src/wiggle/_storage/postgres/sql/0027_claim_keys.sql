-- A start with a deduplication key (docs/flow-control.md#deduplication) is written in one
-- statement too (wiggle/_storage/postgres/start_commit.py ``_write_one``; request ids: migration
-- 0026): this function, called by the statement's check after claim_requests and before the
-- statement's rows are written, claims each (workflow, key) for its new instance exactly as the
-- long way's claim does (a new key is inserted; a held one is taken over only when its holder has
-- finished and its window, ending before p_now in ms, has passed; a holder this function cannot
-- see yet counts as holding it). When every key is claimed it returns how many; when one is held
-- it raises SQLSTATE WG005, the statement writes nothing, and the server claims the keys again
-- in a transaction, where a held key is answered with its holder (deduplicated). The keys come
-- sorted, so concurrent claims lock in one order.
CREATE FUNCTION claim_keys(p_workflows text[], p_keys text[], p_instances text[], p_now bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    claimed integer;
BEGIN
    INSERT INTO start_dedup AS d (workflow, dedup_key, instance_id)
        SELECT * FROM unnest(p_workflows, p_keys, p_instances) AS v(w, k, i) ORDER BY w, k
        ON CONFLICT (workflow, dedup_key) DO UPDATE SET instance_id = EXCLUDED.instance_id
        WHERE EXISTS (SELECT 1 FROM instances h WHERE h.id = d.instance_id
            AND h.status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND h.finished_at + h.dedup_window <= p_now);
    GET DIAGNOSTICS claimed = ROW_COUNT;
    IF claimed < cardinality(p_keys) THEN
        RAISE EXCEPTION '% of % deduplication keys are held', cardinality(p_keys) - claimed,
            cardinality(p_keys) USING ERRCODE = 'WG005';
    END IF;
    RETURN claimed;
END
$$;

-- A server that wrote an instance's last transition keeps what it wrote (group_commit.py
-- StateCache) and, for the next transition of that instance, applies the action to that copy and
-- sends the check, the writes and COMMIT in one round trip instead of reading the instance first.
-- expect_unchanged is the check: it locks the instances in id order (as every transaction that
-- changes instances does, so no deadlock), then compares each instance's print (its row's xmin,
-- then each active token's id and xmin, by id in byte order) with the one the server expects.
-- xmin names the transaction that wrote a row's version, so equal prints mean no transaction has
-- changed the instance or its active tokens since the copy was made, whoever it was (another
-- server, a claim, an operator). A PL/pgSQL function is VOLATILE: under READ COMMITTED the
-- comparison's snapshot follows the locks and sees every commit of the lock's previous holder.
-- A different print raises WG003 (nothing is written: the server reads and runs the action again);
-- else it returns this transaction's id, the xmin of every row the transaction writes.
CREATE FUNCTION expect_unchanged(p_ids text[], p_prints text[]) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    stale text;
BEGIN
    PERFORM 1 FROM instances WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    SELECT e.id INTO stale
    FROM unnest(p_ids, p_prints) AS e(id, print)
    WHERE e.print IS DISTINCT FROM (
        SELECT i.xmin::text || '|' || coalesce((
            SELECT string_agg(t.id || '@' || t.xmin::text, ',' ORDER BY t.id COLLATE "C")
            FROM tokens t
            -- the active statuses (wiggle/_engine/state.py ACTIVE_TOKEN_STATUSES), written as
            -- the partial index tokens_active (migration 0002) says them, so the count uses it
            WHERE t.instance_id = i.id AND t.status IN ('AWAITING', 'JOINED', 'READY', 'RUNNING', 'WAITING')
        ), '')
        FROM instances i
        WHERE i.id = e.id
    )
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'instance % changed since this server last wrote it', stale
            USING ERRCODE = 'WG003';
    END IF;
    RETURN pg_current_xact_id()::xid::text;
END
$$;

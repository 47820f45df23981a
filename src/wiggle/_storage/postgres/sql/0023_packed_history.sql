-- A transaction's history entries of one instance in one row (wiggle/_storage/postgres/codecs.py,
-- ``history_rows`` and ``history_from``): the row's columns hold the first entry, ``more`` the
-- others, in order, as a JSON array of arrays (each entry's fields after instance_id, in the
-- columns' order; trailing empty strings left out; token_id and worker_id null where they are
-- the row's). A LOCAL_ASYNC run of 20 steps wrote 20 rows, each with two index entries, and
-- those rows were a third of PostgreSQL's work per instance (bench/README.md, "Round
-- twenty-two"). ``more`` is NULL on a row of one entry and on every row written before.
ALTER TABLE history ADD COLUMN IF NOT EXISTS more bytea;

-- Every entry, one row each, for reading the history in SQL: ORDER BY seq, pos is its order.
CREATE OR REPLACE VIEW history_entries AS
SELECT h.seq, 0::bigint AS pos, h.instance_id, h.token_id, h.node_id, h.kind, h.attempt, h.worker_id,
       h.started_at, h.ended_at, h.outcome, h.error, h.child_id, h.traceback
FROM history h
UNION ALL
SELECT h.seq, e.pos, h.instance_id, coalesce(e.v->>0, h.token_id), e.v->>1, e.v->>2, (e.v->>3)::integer,
       coalesce(e.v->>4, h.worker_id),
       (e.v->>5)::bigint, (e.v->>6)::bigint, e.v->>7, coalesce(e.v->>8, ''), coalesce(e.v->>9, ''),
       coalesce(e.v->>10, '')
FROM history h,
     jsonb_array_elements(convert_from(h.more, 'UTF8')::jsonb) WITH ORDINALITY AS e(v, pos)
WHERE h.more IS NOT NULL;

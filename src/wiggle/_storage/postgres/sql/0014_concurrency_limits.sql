-- Concurrency limits (docs/flow-control.md#concurrency-limits; wiggle/_engine/limits.py): a token
-- at a limited step carries the key it is counted under and that key's most attempts at once.
-- A key's count is its RUNNING tokens, read through tokens_limit_held by the claim
-- (statements.py) under a per-key advisory lock (store.py), so nothing is kept that a crash
-- could leak: a token that stops RUNNING stops counting.
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS limit_key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS limit_max integer NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS tokens_limit_held ON tokens (limit_key)
    WHERE status = 'RUNNING' AND limit_key <> '';

-- Per-key rate limits on steps (docs/flow-control.md#per-key-rate-limits; wiggle/_engine/limits.py):
-- a READY token at a rate-limited step carries the key its claim counts under and that key's
-- rate (claims per period). A key's rate state is one number, ``tat`` (ms, the first moment its
-- next claim may happen; wiggle/_storage/queue_limits.py rate_admit), in ``rate_keys``, read and
-- written by the claim (store.py, limits.py) under the key's advisory lock. A row whose moment
-- has passed says nothing (a key without a row may go at once): the purge deletes old ones.
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS rate_key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS rate_max integer NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS rate_period_millis bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS rate_keys (
    key  text COLLATE "C" PRIMARY KEY,
    tat  double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS rate_keys_tat ON rate_keys (tat);
-- the READY steps of a key (the queue page's count of rate-waiting steps, the next moment a
-- rate-waiting step of a queue may go)
CREATE INDEX IF NOT EXISTS tokens_rate_ready ON tokens (rate_key)
    WHERE status = 'READY' AND rate_key <> '';

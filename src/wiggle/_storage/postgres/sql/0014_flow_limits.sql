-- Concurrency limits (docs/flow-control.md#concurrency-limits; wiggle/_engine/limits.py): a token
-- at a limited step carries the key it is counted under and that key's most attempts at once.
-- A key's count is its RUNNING tokens, read through tokens_limit_held by the claim
-- (statements.py) under a per-key advisory lock (store.py), so nothing is kept that a crash
-- could leak: a token that stops RUNNING stops counting.
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS limit_key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS limit_max integer NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS tokens_limit_held ON tokens (limit_key)
    WHERE status = 'RUNNING' AND limit_key <> '';

-- Queue limits (docs/flow-control.md#queue-limits; wiggle/_storage/queue_limits.py): one row per
-- limited queue, set by SetQueueLimit and read by every server. A claim on a limited queue locks
-- its row (FOR UPDATE) for the rest of its transaction: the claims of one limited queue, on any
-- server, take turns. ``tat`` is the rate's state (ms). A token a claim on a queue with
-- max_running marked queue_held counts against it while RUNNING (tokens_queue_held).
CREATE TABLE IF NOT EXISTS queue_limits (
    queue               text COLLATE "C" PRIMARY KEY,
    max_running         integer NOT NULL DEFAULT 0,
    rate_max            integer NOT NULL DEFAULT 0,
    rate_period_millis  bigint NOT NULL DEFAULT 0,
    tat                 double precision NOT NULL DEFAULT 0
);
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS queue_held boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS tokens_queue_held ON tokens (queue) WHERE status = 'RUNNING' AND queue_held;

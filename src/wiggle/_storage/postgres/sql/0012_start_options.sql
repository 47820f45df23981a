-- Start options (docs/flow-control.md; wiggle/_engine/start_options.py): priority, delayed
-- starts, deduplication keys.
ALTER TABLE instances ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN IF NOT EXISTS start_at bigint NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN IF NOT EXISTS dedup_key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN IF NOT EXISTS dedup_window bigint NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0;

-- The claim (statements.py): due READY tokens of a queue in claim-rank order, the priority aged by
-- one level per minute waited (start_options.PRIORITY_AGING_MILLIS = 60000: change both together).
-- With every priority 0 the rank is available_at, the order tokens_ready gave; tokens_ready stays
-- for next_ready (the earliest available_at of a queue).
CREATE INDEX IF NOT EXISTS tokens_claim ON tokens (queue, (available_at - priority * 60000), id)
    WHERE status = 'READY';

-- Deduplication keys: the instance that holds each (workflow, key). The primary key is the unique
-- index that makes concurrent starts with one key, on any server, create one instance: the start
-- inserts its row ON CONFLICT and takes an existing row over only when its holder has finished
-- and its window has passed (start_commit.py). Rows go with their instance (retention purge);
-- the foreign key is checked at commit, as for start_requests (migration 0007).
CREATE TABLE IF NOT EXISTS start_dedup (
    workflow    text COLLATE "C" NOT NULL,
    dedup_key   text COLLATE "C" NOT NULL,
    instance_id text COLLATE "C" NOT NULL
        REFERENCES instances (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    PRIMARY KEY (workflow, dedup_key)
);
CREATE INDEX IF NOT EXISTS start_dedup_instance ON start_dedup (instance_id);

-- A request id answered with another instance's (a deduplicated start) says so on a repeat.
ALTER TABLE start_requests ADD COLUMN IF NOT EXISTS deduplicated boolean NOT NULL DEFAULT false;

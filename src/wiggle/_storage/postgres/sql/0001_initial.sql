-- Wiggle schema, version 1.
--
-- Run by wiggle._storage.postgres.migrate() with search_path set to the configured schema, so
-- names are unqualified here. Timestamps are integer milliseconds since the epoch. Contexts,
-- join state and fork stacks are msgspec JSON in bytea: stored and returned byte for byte (jsonb
-- would reorder keys and cost a parse on every write). Ids use the "C" collation: they are ASCII,
-- time-sortable, and compared byte-wise (fast, and newest-first listing is plain id order).

CREATE TABLE definitions (
    name          text COLLATE "C" NOT NULL,
    version       text COLLATE "C" NOT NULL,
    definition    bytea  NOT NULL,              -- the canonical JSON form
    registered_at bigint NOT NULL,
    seq           bigint GENERATED ALWAYS AS IDENTITY,  -- breaks registered_at ties (same ms)
    PRIMARY KEY (name, version)
);
-- "latest version of a name" is the newest registration
CREATE INDEX definitions_latest ON definitions (name, registered_at DESC, seq DESC);

CREATE TABLE instances (
    id             text COLLATE "C" PRIMARY KEY,
    workflow       text COLLATE "C" NOT NULL,
    version        text COLLATE "C" NOT NULL,
    status         text   NOT NULL,
    context        bytea  NOT NULL,
    correlation_id text COLLATE "C" NOT NULL DEFAULT '',
    reason         text   NOT NULL DEFAULT '',
    error          text   NOT NULL DEFAULT '',
    created_at     bigint NOT NULL,
    updated_at     bigint NOT NULL,
    finished_at    bigint NOT NULL DEFAULT 0,
    token_seq      integer NOT NULL DEFAULT 0,
    joins          bytea  NOT NULL,
    steps          integer NOT NULL DEFAULT 0
) WITH (fillfactor = 80);  -- room for HOT updates: each step rewrites the row, no indexed column changes
-- listing by status (RUNNING pages never touch finished rows), by workflow, by correlation id
CREATE INDEX instances_status ON instances (status, id);
CREATE INDEX instances_workflow ON instances (workflow, id);
CREATE INDEX instances_correlation ON instances (correlation_id, id) WHERE correlation_id <> '';
-- retention purge
CREATE INDEX instances_finished ON instances (finished_at) WHERE status <> 'RUNNING';

CREATE TABLE tokens (
    id               text COLLATE "C" PRIMARY KEY,  -- "<instance id>.<n>"
    instance_id      text COLLATE "C" NOT NULL,
    node_id          text   NOT NULL,
    status           text   NOT NULL,
    kind             text   NOT NULL,
    queue            text COLLATE "C" NOT NULL DEFAULT '',
    attempt          integer NOT NULL DEFAULT 1,
    available_at     bigint NOT NULL DEFAULT 0,
    lease_owner      text   NOT NULL DEFAULT '',
    lease_expires_at bigint NOT NULL DEFAULT 0,
    last_error       text   NOT NULL DEFAULT '',
    context          bytea,                          -- NULL on the main line
    fork_stack       bytea,                          -- NULL when not in a fork
    started_at       bigint NOT NULL DEFAULT 0,
    local_run_owner  text   NOT NULL DEFAULT '',
    local_run_steps  integer NOT NULL DEFAULT 0,
    created_at       bigint NOT NULL DEFAULT 0,
    finished_at      bigint NOT NULL DEFAULT 0
);
-- an instance's tokens (loading under the instance lock, purge)
CREATE INDEX tokens_instance ON tokens (instance_id);
-- claim: due READY tokens of a queue, oldest available_at first
CREATE INDEX tokens_ready ON tokens (queue, available_at) WHERE status = 'READY';
-- clock duties: lease expiry, and timers (sleeps and user-task deadlines)
CREATE INDEX tokens_leases ON tokens (lease_expires_at) WHERE status = 'RUNNING';
CREATE INDEX tokens_timers ON tokens (available_at)
    WHERE status = 'WAITING' OR (status = 'AWAITING' AND available_at > 0);

CREATE TABLE history (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- insertion order
    instance_id text COLLATE "C" NOT NULL,
    token_id    text COLLATE "C" NOT NULL,
    node_id     text    NOT NULL,
    kind        text    NOT NULL,
    attempt     integer NOT NULL,
    worker_id   text    NOT NULL,
    started_at  bigint  NOT NULL,
    ended_at    bigint  NOT NULL,
    outcome     text    NOT NULL,
    error       text    NOT NULL DEFAULT ''
);
CREATE INDEX history_instance ON history (instance_id, seq);

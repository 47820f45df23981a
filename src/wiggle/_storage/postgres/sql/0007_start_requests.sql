-- Idempotent starts (docs/semantics.md#idempotent-starts): the request id a client gave a start,
-- and the instance that start created. The primary key is the unique index that makes a repeated
-- request id find the first instance instead of starting a second one. Rows go with their
-- instance (retention purge); the foreign key is checked at commit because a start inserts its
-- request row before its instance row, in one transaction.
CREATE TABLE start_requests (
    request_id  text COLLATE "C" PRIMARY KEY,
    instance_id text COLLATE "C" NOT NULL
        REFERENCES instances (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
);
-- the cascade from a purged instance finds its request row by instance id
CREATE INDEX start_requests_instance ON start_requests (instance_id);

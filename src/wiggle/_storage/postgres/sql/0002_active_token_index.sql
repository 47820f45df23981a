-- Listing and loading an instance join its *active* tokens only: index exactly those, so neither
-- a custom nor a generic plan reads an instance's finished tokens (docs/postgres-plans.md).
CREATE INDEX IF NOT EXISTS tokens_active ON tokens (instance_id)
    WHERE status IN ('AWAITING', 'JOINED', 'READY', 'RUNNING', 'WAITING');

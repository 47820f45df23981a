-- Workflow-level concurrency limits (docs/flow-control.md#workflow-concurrency;
-- wiggle/_engine/workflow_limits.py): an instance of a limited workflow carries the key's label
-- it counts under and the limit's max; ``conc_since`` is set while it waits SCHEDULED for a slot
-- (FIFO order), ``conc_retry`` holds a retry waiting for one. A key's count is its RUNNING
-- instances, read by an admission under a per-key advisory lock (postgres/workflow_limits.py):
-- nothing is kept that a crash could leak.
ALTER TABLE instances ADD COLUMN IF NOT EXISTS conc_key text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN IF NOT EXISTS conc_max integer NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN IF NOT EXISTS conc_since bigint NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN IF NOT EXISTS conc_retry text NOT NULL DEFAULT '';
-- The live and waiting instances of a key (only those of limited workflows, only while so).
CREATE INDEX IF NOT EXISTS instances_conc ON instances (workflow, conc_key, conc_since, id)
    WHERE conc_key <> '' AND status IN ('RUNNING', 'SCHEDULED');

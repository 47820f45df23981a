-- Time limits (docs/semantics.md#step-time-limits, #workflow-time-limits): a RUNNING token's
-- start-to-close deadline (its lease never outlives it: the lease sweep applies it), and a
-- RUNNING instance's deadline, swept by the clock duties through instances_deadline.
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS deadline_at bigint NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN IF NOT EXISTS timeout_millis bigint NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN IF NOT EXISTS deadline_at bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS instances_deadline ON instances (deadline_at)
    WHERE status = 'RUNNING' AND deadline_at > 0;

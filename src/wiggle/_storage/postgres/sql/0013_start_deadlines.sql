-- Schedule-to-start limits (docs/semantics.md#step-time-limits): a READY token's deadline_at
-- (migration 0011's column) is the moment its step fails unless claimed; the clock duties find
-- them through this index.
CREATE INDEX IF NOT EXISTS tokens_start_deadline ON tokens (deadline_at)
    WHERE status = 'READY' AND deadline_at > 0;

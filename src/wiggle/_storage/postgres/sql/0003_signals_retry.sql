-- Signals and resuming a failed instance (issue #11; docs/semantics.md#signal and
-- #resuming-a-failed-instance). Three instance columns, in the order of the Instance Struct's
-- fields (wiggle/_engine/state.py): msgspec JSON in bytea, like joins.
ALTER TABLE instances ADD COLUMN IF NOT EXISTS signals bytea NOT NULL DEFAULT '\x5b5d'::bytea;      -- "[]"
ALTER TABLE instances ADD COLUMN IF NOT EXISTS signal_ids bytea NOT NULL DEFAULT '\x5b5d'::bytea;   -- "[]"
ALTER TABLE instances ADD COLUMN IF NOT EXISTS retry_point bytea;                                   -- NULL: none

-- Sub-workflows (docs/semantics.md#sub-workflows): a child instance names its parent instance and
-- the parent token waiting for it, and its depth; a waiting token and a history entry name the child.
ALTER TABLE instances ADD COLUMN IF NOT EXISTS parent_id text NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN IF NOT EXISTS parent_token text NOT NULL DEFAULT '';
ALTER TABLE instances ADD COLUMN IF NOT EXISTS depth integer NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS child_id text NOT NULL DEFAULT '';
ALTER TABLE history ADD COLUMN IF NOT EXISTS child_id text NOT NULL DEFAULT '';
-- The orphan sweep (a crash between a parent's cancellation and its child's) reads running
-- children only.
CREATE INDEX IF NOT EXISTS instances_running_children ON instances (parent_id)
    WHERE parent_id <> '' AND status = 'RUNNING';

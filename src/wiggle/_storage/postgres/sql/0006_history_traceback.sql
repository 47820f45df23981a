-- A failed attempt's traceback, as the worker sent it and the server bounded it
-- (docs/semantics.md#failure-tracebacks). Empty for every other entry.
ALTER TABLE history ADD COLUMN IF NOT EXISTS traceback text NOT NULL DEFAULT '';

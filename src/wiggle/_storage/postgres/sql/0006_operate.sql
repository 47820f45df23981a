-- A failed attempt's traceback, as the worker sent it and the server bounded it
-- (docs/semantics.md#failure-tracebacks). Empty for every other entry.
ALTER TABLE history ADD COLUMN IF NOT EXISTS traceback text NOT NULL DEFAULT '';

-- The W3C trace context of the span that started an instance (OpenTelemetry; empty without it):
-- every step a worker runs is traced under it (docs/semantics.md#tracing).
ALTER TABLE instances ADD COLUMN IF NOT EXISTS traceparent text NOT NULL DEFAULT '';

-- Fencing (docs/semantics.md#fencing): a token counts its claims, and a task id is
-- "<token id>@<claim>"; a report names the claim it was made for, and one for an earlier claim of
-- the same token is refused. Tokens already stored start at 0 (their next claim is 1).
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS claim integer NOT NULL DEFAULT 0;

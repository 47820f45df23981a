-- A chained step remembers which report chained it (wiggle/_engine/state.py ``Token.chained_from``:
-- "<the report's task id> <the chained claim's task id>"; wiggle/_server/delivery.py ``chain``).
-- A report resent after its answer was lost names a claim that is settled already; the server
-- finds the step that report chained, still leased to the same worker under the same claim and not
-- yet started on, and answers the resend with it again instead of leaving it to run out its lease
-- (docs/semantics.md, "Chained steps"). '' for every step claimed by a poll. A server of an earlier
-- release leaves the column as it is; its own claims are new claims, so a value it leaves behind
-- names a claim that no longer stands and is never matched.
ALTER TABLE tokens ADD COLUMN IF NOT EXISTS chained_from text NOT NULL DEFAULT '';

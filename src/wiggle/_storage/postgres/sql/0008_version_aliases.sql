-- Version aliases (issue #12): upstream Wiggle's clients name a workflow version by an int32, ours
-- are content hashes. An alias names one registered version of its workflow; registering an
-- explicit upstream version again points the alias at the new hash (an upsert on the key).
-- Definitions are never deleted (retention purges instances only); should one ever be, its
-- aliases go with it (the cascade), and dropping the schema drops the table.
CREATE TABLE version_aliases (
    workflow text COLLATE "C" NOT NULL,
    alias    integer NOT NULL,
    version  text COLLATE "C" NOT NULL,
    PRIMARY KEY (workflow, alias),
    FOREIGN KEY (workflow, version) REFERENCES definitions (name, version) ON DELETE CASCADE
);
-- the cascade, and the reverse look-up (which alias names a version), go by version
CREATE INDEX version_aliases_version ON version_aliases (workflow, version);

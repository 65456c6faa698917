-- The grant protocol: the version of the rules by which token transactions grant slots. A binary
-- refuses to grant when the database's protocol is newer than its own, so that during a rolling
-- upgrade no host grants by old rules once a newer binary has migrated the database (hosts still
-- on the old binary keep completing what they run). A migration that changes the rules bumps it.

CREATE TABLE taskling.protocol (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    version     integer     NOT NULL CHECK (version >= 1),
    changed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

INSERT INTO taskling.protocol (version) VALUES (1);

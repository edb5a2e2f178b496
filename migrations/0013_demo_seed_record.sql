-- What the demo seed (`crank up`, `crank seed-demo`) has created in a workspace.
-- The seed creates only the demo operations and agents that are missing and that
-- it has never created there before, so what a user edited or deleted stays as
-- the user left it (docs/architecture.md, "The demo seed").
CREATE TABLE demo_seeded (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    kind          text NOT NULL CHECK (kind IN ('operation', 'agent')),
    name          text NOT NULL,
    seeded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, kind, name)
);

-- Ended MCP sessions. Session ids are signed and carry their own expiry, so a
-- replica needs no row to accept one; it needs this list to refuse one that a
-- DELETE ended on any replica. Rows outlive the session's expiry by nothing:
-- once a session would have expired anyway, its row can be pruned.
CREATE TABLE mcp_session_terminations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_hash  bytea NOT NULL UNIQUE,
    expires_at    timestamptz NOT NULL,
    ended_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX mcp_session_terminations_expiry ON mcp_session_terminations (expires_at);

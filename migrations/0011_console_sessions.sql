-- The web console's sign-in sessions and one-time sign-in links
-- (docs/architecture.md, "The console"). Both store only a SHA-256 of the random
-- value the browser holds. A session belongs to the admin token it was opened
-- with: revoking or expiring the token ends its sessions, because every request
-- re-checks the token. Rows past their expiry are pruned by the gateway's upkeep.
CREATE TABLE console_sessions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hash        bytea NOT NULL UNIQUE,
    token_id    bigint NOT NULL REFERENCES admin_tokens (id) ON DELETE CASCADE,
    csrf        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);

CREATE TABLE console_sign_in_links (
    hash        bytea PRIMARY KEY,
    token_id    bigint NOT NULL REFERENCES admin_tokens (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

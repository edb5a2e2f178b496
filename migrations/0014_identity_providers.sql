-- The identity providers (OpenID Connect / OAuth 2.1 authorization servers) a
-- workspace trusts (docs/architecture.md, "Identity (in progress)"). Stored and
-- published to the gateways with the catalog; the gateway does not yet check
-- tokens against them.
--
-- issuer                 compared byte for byte with a token's iss, so stored as given;
--                        metadata and JWKS are discovered from it (RFC 8414 / OIDC).
-- introspection_secret   the NAME of a workspace secret holding the RFC 7662 client
--                        secret, like an operation's request.auth; never the value.
CREATE TABLE identity_providers (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id             bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name                     text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    issuer                   text NOT NULL,
    algorithms               text[] NOT NULL,
    token_types              text[] NOT NULL,
    subject_claim            text NOT NULL,
    groups_claim             text,
    leeway_s                 integer NOT NULL CHECK (leeway_s BETWEEN 0 AND 300),
    introspection_client_id  text,
    introspection_secret     text,
    revision                 integer NOT NULL DEFAULT 1,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, name),
    -- Two providers with one issuer would make a token's iss ambiguous.
    UNIQUE (workspace_id, issuer),
    CHECK ((introspection_client_id IS NULL) = (introspection_secret IS NULL))
);

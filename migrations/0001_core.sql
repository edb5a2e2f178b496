-- Core state: workspaces, admins and roles, operations with immutable versions,
-- agents with a published state, API keys, encrypted secrets, audit log and the
-- catalog version that the gateways poll and LISTEN for.

CREATE TABLE workspaces (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slug        text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    title       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- An admin user is whoever holds admin tokens: a person or a CI pipeline.
CREATE TABLE admin_users (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name               text NOT NULL,
    is_instance_admin  boolean NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workspace_members (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    user_id       bigint NOT NULL REFERENCES admin_users (id) ON DELETE CASCADE,
    role          text NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
    PRIMARY KEY (workspace_id, user_id)
);

-- Every authenticated request reads the caller's roles by user.
CREATE INDEX workspace_members_by_user ON workspace_members (user_id);

-- Admin tokens and API keys share one format (crk_<kind>_...) and one hashing
-- scheme: HMAC-SHA-256 with a key derived from CRANK_SECRET_KEY.
CREATE TABLE admin_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       bigint NOT NULL REFERENCES admin_users (id) ON DELETE CASCADE,
    prefix        text NOT NULL,
    hash          bytea NOT NULL UNIQUE,
    name          text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);

CREATE TABLE operations (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id    bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name            text NOT NULL CHECK (name ~ '^[a-zA-Z0-9_-]{1,64}$'),
    draft           jsonb NOT NULL,
    revision        integer NOT NULL DEFAULT 1,
    latest_version  integer,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, name)
);

-- Published versions are immutable: nothing updates or deletes a row here.
CREATE TABLE operation_versions (
    operation_id  bigint NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    version       integer NOT NULL CHECK (version > 0),
    spec          jsonb NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT now(),
    published_by  text NOT NULL,
    note          text NOT NULL DEFAULT '',
    PRIMARY KEY (operation_id, version)
);

CREATE FUNCTION crank_refuse_version_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'published operation versions are immutable'
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER operation_versions_immutable
    BEFORE UPDATE ON operation_versions
    FOR EACH ROW EXECUTE FUNCTION crank_refuse_version_change();

CREATE TABLE agents (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id       bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    slug               text NOT NULL CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    draft              jsonb NOT NULL,
    revision           integer NOT NULL DEFAULT 1,
    -- The published state: {title, description, operations, rate_limit}; NULL when unpublished.
    published          jsonb,
    published_version  integer NOT NULL DEFAULT 0,
    published_at       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, slug)
);

CREATE TABLE api_keys (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    agent_id      bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    kind          text NOT NULL CHECK (kind IN ('agent', 'approval')),
    prefix        text NOT NULL,
    hash          bytea NOT NULL UNIQUE,
    name          text NOT NULL DEFAULT '',
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);

CREATE INDEX api_keys_by_agent ON api_keys (agent_id);
CREATE INDEX api_keys_by_workspace ON api_keys (workspace_id);

CREATE TABLE secrets (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name          text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.-]{1,128}$'),
    -- AES-256-GCM; the associated data binds the ciphertext to (workspace, name).
    ciphertext    bytea NOT NULL,
    nonce         bytea NOT NULL,
    key_id        text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, name)
);

CREATE TABLE audit_log (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id   bigint REFERENCES workspaces (id) ON DELETE CASCADE,
    at             timestamptz NOT NULL DEFAULT now(),
    actor          text NOT NULL,
    action         text NOT NULL,
    resource_type  text NOT NULL,
    resource_name  text NOT NULL DEFAULT '',
    details        jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_by_workspace ON audit_log (workspace_id, id DESC);

-- One row: the version of everything a gateway snapshot holds. Every publish,
-- unpublish, key and secret change bumps it in the same transaction and
-- notifies, so gateways reload at once (LISTEN) or on their next poll.
-- A transaction bumps it at most once, however many changes it makes
-- (`crank apply --publish` of a whole file is one new version, one NOTIFY):
-- bumped_xact remembers which transaction made the current version.
CREATE TABLE catalog_state (
    id           boolean PRIMARY KEY DEFAULT true CHECK (id),
    version      bigint NOT NULL DEFAULT 1,
    changed_at   timestamptz NOT NULL DEFAULT now(),
    bumped_xact  xid8
);

INSERT INTO catalog_state DEFAULT VALUES;

-- The catalog version this transaction's changes become visible at. The
-- first call in a transaction increments it and notifies; later calls in the
-- same transaction return that version again. A rolled-back savepoint undoes
-- its bump too, so the next call bumps again.
CREATE FUNCTION crank_bump_catalog() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    new_version bigint;
BEGIN
    UPDATE catalog_state
       SET version = version + 1, changed_at = now(), bumped_xact = pg_current_xact_id()
     WHERE bumped_xact IS DISTINCT FROM pg_current_xact_id()
     RETURNING version INTO new_version;
    IF FOUND THEN
        PERFORM pg_notify('crank_catalog', new_version::text);
    ELSE
        SELECT version INTO new_version FROM catalog_state;
    END IF;
    RETURN new_version;
END;
$$;

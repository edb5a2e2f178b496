-- Safety flows (docs/architecture.md, "Gate order"): human approvals with leases, used
-- DELETE confirmation tokens, and the gateway's idempotency memory. None of
-- these is batched: every row is written before the call that needs it goes on.

CREATE TABLE approvals (
    id                text PRIMARY KEY,                 -- approval_<random>
    workspace_id      bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    agent_id          bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    operation_id      bigint NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    key_id            bigint,                           -- the agent key that asked
    tool              text NOT NULL,
    version           integer NOT NULL,
    arguments         jsonb NOT NULL,
    arguments_hash    bytea NOT NULL,                   -- SHA-256 of RFC 8785 canonical JSON
    request           jsonb NOT NULL,                   -- the resolved request, secrets masked
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'approved', 'denied', 'expired',
                                        'executing', 'completed', 'failed')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,             -- a pending row expires then
    decided_at        timestamptz,
    decided_by        text,                             -- the approval key's prefix
    note              text,
    completed_at      timestamptz,
    attempt           integer NOT NULL DEFAULT 0,       -- claims so far; fences finishing
    max_attempts      integer NOT NULL DEFAULT 3,
    lease_owner       text,
    lease_expires_at  timestamptz,
    response_payload  jsonb
);

-- One active approval per (agent, operation, version, arguments): enforced
-- here, so concurrent identical calls on any replicas meet at this index.
CREATE UNIQUE INDEX approvals_one_active
    ON approvals (agent_id, operation_id, version, arguments_hash)
    WHERE status IN ('pending', 'approved', 'executing');
CREATE INDEX approvals_by_agent ON approvals (agent_id, created_at DESC, id DESC);
CREATE INDEX approvals_claimable ON approvals (lease_expires_at NULLS FIRST)
    WHERE status IN ('approved', 'executing');
CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE status = 'pending';
-- Retention (mcp_gateway.upkeep.retention) prunes finished rows by when they finished:
-- completed_at (completed, failed), decided_at (denied), expires_at (expired).
CREATE INDEX approvals_finished ON approvals ((coalesce(completed_at, decided_at, expires_at)))
    WHERE status IN ('denied', 'expired', 'completed', 'failed');

-- The transition table of docs/architecture.md, "Approval state machine", in SQL: an UPDATE that would
-- move a row along any other edge changes nothing (the row is skipped).
CREATE FUNCTION crank_approval_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, NEW.status) IN (
        ('pending', 'approved'), ('pending', 'denied'), ('pending', 'expired'),
        ('approved', 'executing'),
        ('executing', 'executing'), ('executing', 'approved'),
        ('executing', 'completed'), ('executing', 'failed')
    ) THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER approvals_transition
    BEFORE UPDATE ON approvals
    FOR EACH ROW EXECUTE FUNCTION crank_approval_transition();

-- DELETE confirmation tokens are signed (mcp_gateway.pipeline.confirmation_tokens) and need
-- no row to be issued; a row here marks one used, once, on every replica.
CREATE TABLE confirmation_uses (
    token_hash  bytea PRIMARY KEY,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX confirmation_uses_expiry ON confirmation_uses (expires_at);

-- What the gateway remembers per (agent, operation, idempotency key)
-- (mcp_gateway.pipeline.idempotency). The key is stored as its SHA-256, so any length
-- fits the index. in_progress: a call owns the key (``claim``) until
-- locked_until; unknown: that call ended without a known upstream outcome and
-- the key stays locked until locked_until; completed: ``result`` is replayed.
-- A row past expires_at is forgotten (claimable, and pruned by retention).
CREATE TABLE idempotency_records (
    agent_id         bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    operation_id     bigint NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    key_hash         bytea NOT NULL,   -- SHA-256 of the idempotency key
    arguments_hash   bytea NOT NULL,   -- SHA-256 of RFC 8785 canonical JSON
    status           text NOT NULL CHECK (status IN ('in_progress', 'unknown', 'completed')),
    claim            bytea NOT NULL,   -- random per claim; fences finishing
    locked_until     timestamptz,      -- in_progress, unknown: the key is locked until then
    result           jsonb,            -- completed: the tool result to replay
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (agent_id, operation_id, key_hash),
    CHECK ((status = 'completed') = (result IS NOT NULL)),
    CHECK ((status = 'completed') = (locked_until IS NULL))
);
CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at);

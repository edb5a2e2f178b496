-- Signed webhooks (docs/architecture.md, "Webhooks"): per-agent subscriptions and
-- a durable outbox of deliveries, written by a trigger in the same transaction as
-- the approval change it reports, so no transition is told twice or never.

CREATE TABLE webhook_subscriptions (
    id             text PRIMARY KEY,                -- whsub_<random>
    workspace_id   bigint NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    agent_id       bigint NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    url            text NOT NULL,
    events         text[] NOT NULL CHECK (cardinality(events) > 0 AND events <@ ARRAY[
                       'approval.created', 'approval.decided', 'approval.completed',
                       'approval.failed', 'approval.expired']),
    format         text NOT NULL CHECK (format IN ('standard', 'slack')),
    -- The signing secret (whsec_...), AES-256-GCM like workspace secrets; the
    -- associated data binds it to this subscription's id.
    ciphertext     bytea NOT NULL,
    nonce          bytea NOT NULL,
    key_id         text NOT NULL,
    created_by     text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);
-- The trigger below looks up the live subscriptions of one agent per transition.
CREATE INDEX webhook_subscriptions_live ON webhook_subscriptions (agent_id)
    WHERE revoked_at IS NULL;

-- One row per (subscription, event): the outbox and the delivery log at once.
-- pending: waiting for next_attempt_at (or a lease that expired); delivering:
-- leased; delivered | failed: final. ``payload`` is the event as it happened
-- (arguments unmasked, as in approvals.arguments); ``body`` is what is sent,
-- rendered and masked at the first attempt and kept, so every attempt of one
-- webhook-id sends the same bytes.
CREATE TABLE webhook_deliveries (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id        text NOT NULL UNIQUE,          -- msg_<random>, the webhook-id header
    subscription_id   text NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    workspace_id      bigint NOT NULL,
    agent_id          bigint NOT NULL,
    approval_id       text NOT NULL,
    event             text NOT NULL,
    payload           jsonb NOT NULL,
    body              bytea,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'delivering', 'delivered', 'failed')),
    attempts          integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_expires_at  timestamptz,
    last_status       integer,                       -- the receiver's last HTTP status
    last_error        text,
    delivered_at      timestamptz,
    finished_at       timestamptz                    -- delivered or given up
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status IN ('pending', 'delivering');
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (subscription_id, id DESC);
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at)
    WHERE status IN ('delivered', 'failed');

-- Which event a committed approval change is: an insert is approval.created; an
-- update that changes the status to a decision or an end is the matching event.
-- The transition trigger (migrations/0004) skips forbidden updates before this
-- runs, and executing -> executing (a re-claim) or -> approved (a release) tells
-- no one.
CREATE FUNCTION crank_enqueue_webhooks() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.created';
    ELSIF OLD.status = 'pending' AND NEW.status IN ('approved', 'denied') THEN
        kind := 'approval.decided';
    ELSIF NEW.status = 'completed' THEN
        kind := 'approval.completed';
    ELSIF NEW.status = 'failed' THEN
        kind := 'approval.failed';
    ELSIF NEW.status = 'expired' THEN
        kind := 'approval.expired';
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries
           (webhook_id, subscription_id, workspace_id, agent_id, approval_id, event, payload)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), s.id, NEW.workspace_id,
           NEW.agent_id, NEW.id, kind,
           jsonb_build_object(
               'timestamp', now(),
               'approval_id', NEW.id,
               'workspace', (SELECT slug FROM workspaces WHERE id = NEW.workspace_id),
               'agent', (SELECT slug FROM agents WHERE id = NEW.agent_id),
               'tool', NEW.tool,
               'version', NEW.version,
               'status', NEW.status,
               'decided_by', NEW.decided_by,
               'note', NEW.note,
               'arguments', NEW.arguments)
      FROM webhook_subscriptions s
     WHERE s.agent_id = NEW.agent_id AND s.revoked_at IS NULL AND kind = ANY (s.events);
    IF FOUND THEN
        PERFORM pg_notify('crank_webhooks', '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER approvals_webhooks_insert
    AFTER INSERT ON approvals
    FOR EACH ROW EXECUTE FUNCTION crank_enqueue_webhooks();
CREATE TRIGGER approvals_webhooks_update
    AFTER UPDATE OF status ON approvals
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION crank_enqueue_webhooks();

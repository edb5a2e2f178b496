-- Approval outcomes reach the model (docs/architecture.md, "Approval outcomes"): a repeat
-- tools/call of a finished approval's call gets its outcome once. delivered_at says
-- when an agent's call got it; NULL while nobody has. A delivery claims the row in
-- one statement (``delivered_at IS NULL`` in its WHERE), so one call on one replica
-- gets each outcome.
ALTER TABLE approvals ADD COLUMN delivered_at timestamptz;
-- completed: the worker cut the result to fit the operation's limits; the delivery
-- marks it as a direct call does (_meta crank/truncated).
ALTER TABLE approvals ADD COLUMN result_truncated boolean NOT NULL DEFAULT false;

-- The repeat call's look-up: the latest approval of one (agent, operation, version,
-- arguments hash), newest first.
CREATE INDEX approvals_latest_per_call
    ON approvals (agent_id, operation_id, version, arguments_hash, created_at DESC, id DESC);

-- The transition table gains one edge that keeps the status: a finished row
-- (denied, expired, completed, failed) may set delivered_at once, changing
-- nothing else. Every other UPDATE is judged as before.
CREATE OR REPLACE FUNCTION crank_approval_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, NEW.status) IN (
        ('pending', 'approved'), ('pending', 'denied'), ('pending', 'expired'),
        ('approved', 'executing'),
        ('executing', 'executing'), ('executing', 'approved'),
        ('executing', 'completed'), ('executing', 'failed')
    ) AND NEW.delivered_at IS NULL THEN
        RETURN NEW;
    END IF;
    IF OLD.status IN ('denied', 'expired', 'completed', 'failed')
       AND OLD.delivered_at IS NULL AND NEW.delivered_at IS NOT NULL
       AND to_jsonb(NEW) - 'delivered_at' = to_jsonb(OLD) - 'delivered_at' THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END;
$$;

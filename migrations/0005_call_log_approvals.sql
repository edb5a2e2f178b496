-- Calls the approval worker runs on an agent's behalf are logged too
-- (mcp_gateway.approvals.execution), each with the approval it ran. The
-- tools/call that created the approval (outcome approval_required) carries
-- the same id, so the two rows of one approved call can be read together.
ALTER TABLE call_log ADD COLUMN approval_id text;

-- An approval row stores the agent key that asked (approvals.key_id), which
-- may be NULL; its execution is logged all the same.
ALTER TABLE call_log ALTER COLUMN key_id DROP NOT NULL;

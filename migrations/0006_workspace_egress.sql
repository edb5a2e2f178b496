-- Egress per workspace (docs/architecture.md, "Egress per workspace"): the hosts a
-- workspace's operations may call, inside what the operator allows globally
-- (CRANK_ALLOW_PRIVATE_UPSTREAMS, CRANK_UPSTREAM_ALLOWLIST).
--
-- egress_hosts   NULL: any host the rest of the policy allows; else the only host
--                names (and *.suffix patterns) the workspace may call. Its owner sets it.
-- egress_grants  the globally allowlisted private destinations this workspace may
--                reach (allowlist entry syntax); none by default. Instance admins set it.
-- egress_revision  the ETag of the policy (one revision for both lists).
ALTER TABLE workspaces
    ADD COLUMN egress_hosts     text[],
    ADD COLUMN egress_grants    text[] NOT NULL DEFAULT '{}',
    ADD COLUMN egress_revision  integer NOT NULL DEFAULT 1;

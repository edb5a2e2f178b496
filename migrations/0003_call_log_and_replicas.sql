-- The call log: one row per tools/call, written by the gateway in batches off
-- the hot path (a crash loses at most the last batch). No foreign keys on
-- purpose: a log row outlives the agent or key it names, and a batch must
-- never fail because a workspace was deleted a moment before it was written.
-- Workspace access is still checked: the control plane reads by workspace_id.
CREATE TABLE call_log (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    called_at       timestamptz NOT NULL,
    workspace_id    bigint NOT NULL,
    agent_id        bigint NOT NULL,
    key_id          bigint NOT NULL,
    request_id      text NOT NULL,
    tool            text NOT NULL,
    tool_version    integer,
    outcome         text NOT NULL,            -- 'ok' or an error code of the closed list
    upstream_status integer,                  -- NULL when no answer came back
    attempts        integer NOT NULL DEFAULT 0,
    duration_ms     double precision NOT NULL,  -- the whole tools/call
    upstream_ms     double precision            -- time spent on the upstream, retries included
);

CREATE INDEX call_log_by_workspace ON call_log (workspace_id, id DESC);
CREATE INDEX call_log_by_called_at ON call_log (called_at);

-- Live gateway processes. Each one upserts its row every few seconds; a
-- replica counts the rows seen recently to take its share of a rate limit
-- (mcp_gateway.upkeep.replicas). Rows of dead processes age out of the count and
-- are pruned by whoever heartbeats next.
CREATE TABLE gateway_replicas (
    replica_id    text PRIMARY KEY,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

-- Retention (mcp_gateway.upkeep.retention) deletes audit rows by age.
CREATE INDEX audit_log_by_at ON audit_log (at);

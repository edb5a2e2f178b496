-- The console's approvals page lists a workspace's approvals newest first
-- (control_plane.services.approvals.list_approvals); without this index every page
-- sorted all of the workspace's rows.
CREATE INDEX approvals_by_workspace ON approvals (workspace_id, created_at DESC, id DESC);

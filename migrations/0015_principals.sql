-- Who called, when a person (or client) signed in with a workspace's identity
-- provider instead of using an agent key (docs/architecture.md, "Identity"). Each
-- call log row and approval records the token's principal: its issuer and subject
-- (together they name the person), the display name it carried and the OAuth
-- client it came through. Never the token, its groups or its scopes: a log names
-- who asked, it is no copy of their credentials. NULL for a call an agent key made
-- (key_id names the key then).
--
-- Text columns, no foreign key: a principal is no row of ours, and a log row
-- outlives the provider that vouched for it.
ALTER TABLE call_log
    ADD COLUMN principal_issuer  text,
    ADD COLUMN principal_subject text,
    ADD COLUMN principal_name    text,
    ADD COLUMN client_id         text;

-- The approval's requester: the approved call's own call log row is written by the
-- approval worker, long after the request, from these columns.
ALTER TABLE approvals
    ADD COLUMN principal_issuer  text,
    ADD COLUMN principal_subject text,
    ADD COLUMN principal_name    text,
    ADD COLUMN client_id         text;

-- The call log API's principal_subject filter (control_plane.services.calls) reads a
-- workspace's rows newest first, as call_log_by_workspace does for the others.
-- Partial: key calls, most of the log, never pay for it on insert.
CREATE INDEX call_log_by_principal ON call_log (workspace_id, principal_subject, id DESC)
    WHERE principal_subject IS NOT NULL;

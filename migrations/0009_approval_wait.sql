-- Waiting on the open call (docs/architecture.md, "Waiting for a decision"): a
-- tools/call held open for its approval learns that the approval finished
-- (denied, expired, completed, failed), on whichever replica that happened, from
-- NOTIFY crank_approval_finished with the approval id as payload. The trigger
-- covers every path that finishes a row (a deny, the sweep, a repeat call meeting
-- an overdue row, the worker); delivered when the change commits.
CREATE FUNCTION crank_notify_approval_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crank_approval_finished', NEW.id);
    RETURN NULL;
END;
$$;

CREATE TRIGGER approvals_finished_notify
    AFTER UPDATE OF status ON approvals
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('denied', 'expired', 'completed', 'failed'))
    EXECUTE FUNCTION crank_notify_approval_finished();

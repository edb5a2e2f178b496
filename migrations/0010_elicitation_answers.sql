-- A 2025 client's answer to elicitation/create (docs/architecture.md, "Asking the
-- human in the 2025 era"): the replica holding the tools/call open inserts the row
-- (a random id, bound to the session) before it asks; the replica that receives
-- the client's response POST fills in the answer, which sends
-- NOTIFY crank_elicitation_answered with the id. The waiter reads and deletes the
-- row; a row left behind by a crash is pruned by retention after a day.
CREATE TABLE elicitation_answers (
    id text PRIMARY KEY,
    session_hash bytea NOT NULL,
    answer jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION crank_notify_elicitation_answered() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crank_elicitation_answered', NEW.id);
    RETURN NULL;
END;
$$;

CREATE TRIGGER elicitation_answered_notify
    AFTER UPDATE OF answer ON elicitation_answers
    FOR EACH ROW
    WHEN (OLD.answer IS NULL AND NEW.answer IS NOT NULL)
    EXECUTE FUNCTION crank_notify_elicitation_answered();

-- Operator changes and retirement (execution/changes.go).

-- The audit trail: every change an operator makes to a task — its overrides (limit, enabled,
-- death mode, thresholds, keep settings), retiring or unretiring it or its schedule, forcing one
-- of its blocks, cancelling one of its submissions — written in the transaction that makes the
-- change. Values are text as operators read them ("3", "unlimited", "30s", "14d"); NULL means
-- "not overridden" (inherited from the settings hosts declare).
CREATE TABLE taskling.operator_change (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id     bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    -- The change's transaction time: the fields one change sets share it.
    at          timestamptz NOT NULL DEFAULT now(),
    changed_by  text        NOT NULL,
    field       text        NOT NULL,
    old_value   text,
    new_value   text
);
-- "The last changes of a task", newest first.
CREATE INDEX operator_change_task_idx ON taskling.operator_change (task_id, id DESC);

-- A retired task. Cold columns: no token transaction reads or writes them. Retiring sets the
-- enabled override to false in the same transaction, so every host — binaries older than this
-- migration too — refuses the task's starts through the disabled path the token transactions
-- already read; the override it had before is kept in retired_enabled, and unretiring puts it
-- back.
ALTER TABLE taskling.task_definition
    ADD COLUMN retired_at       timestamptz,
    ADD COLUMN retired_by       text,
    ADD COLUMN retired_enabled  boolean;

-- A retired schedule: its hosts claim none of its instants (the claim's compare-and-set on the
-- cursor requires it not retired) while the task itself may still be started by hand.
ALTER TABLE taskling.schedule
    ADD COLUMN retired_at   timestamptz,
    ADD COLUMN retired_by   text;

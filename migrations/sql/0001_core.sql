-- Core tables: task definitions (one row per task: the token list and the row lock every
-- token transaction takes), executions (one row per start attempt) and their events.

CREATE TABLE taskling.task_definition (
    id                          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    application_name            text        NOT NULL,
    task_name                   text        NOT NULL,
    -- Serialized token list (package tokens). '' is the initial, empty list.
    tokens                      text        NOT NULL DEFAULT '',
    -- Written first in every token transaction so that it takes the row lock before any read.
    hold_lock_execution_id      bigint,
    -- Incremented on every grant; the grant's value is the execution's fencing token.
    fence                       bigint      NOT NULL DEFAULT 0,
    -- Operator overrides (NULL = not overridden): they win over every host's declared settings.
    concurrency_limit           integer,
    enabled                     boolean,
    death_mode                  smallint,
    keep_alive_interval         interval,
    keep_alive_death_threshold  interval,
    override_threshold          interval,
    overrides_updated_at        timestamptz,
    -- The limit last declared by a requester, and by which host, so that hosts with different
    -- configurations show up instead of silently fighting.
    declared_limit              integer,
    declared_by                 text,
    declared_at                 timestamptz,
    -- Until when some requester waits for a slot (WaitForSlot): a release notifies waiters only
    -- while this is in the future, so tasks nobody waits for never pay for NOTIFY.
    waiters_until               timestamptz,
    last_cleaned_at             timestamptz,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_definition_names_key UNIQUE (application_name, task_name)
);

CREATE SEQUENCE taskling.task_execution_id_seq AS bigint;

CREATE TABLE taskling.task_execution (
    -- Reserved with nextval in the acquire transaction's first round trip, so that the grant can
    -- name the execution before its row is inserted.
    id                          bigint      PRIMARY KEY DEFAULT nextval('taskling.task_execution_id_seq'),
    task_id                     bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    started_at                  timestamptz NOT NULL,
    completed_at                timestamptz,
    last_keep_alive             timestamptz NOT NULL,
    host_name                   text        NOT NULL,
    -- Liveness settings copied from the effective settings at start: a holder is judged by its own row.
    death_mode                  smallint    NOT NULL,
    keep_alive_interval         interval,
    keep_alive_death_threshold  interval,
    override_threshold          interval,
    reference_value             text,
    idempotent                  boolean     NOT NULL DEFAULT false,
    header                      jsonb,
    failed                      boolean     NOT NULL DEFAULT false,
    blocked                     boolean     NOT NULL DEFAULT false,
    blocked_reason              text,
    token_id                    uuid,
    fence                       bigint,
    items_done                  bigint,
    items_total                 bigint,
    scheduled_for               timestamptz,
    -- Set by the acquire transaction that found this execution dead and took its slot: its later
    -- heartbeats and release fail their identity check.
    reclaimed_at                timestamptz,
    library_version             text        NOT NULL,
    CONSTRAINT task_execution_death_mode_check CHECK (death_mode IN (1, 2))
);
ALTER SEQUENCE taskling.task_execution_id_seq OWNED BY taskling.task_execution.id;

-- "Last N executions of a task" (history, the API) and the idempotency lookup.
CREATE INDEX task_execution_task_id_idx ON taskling.task_execution (task_id, id DESC);
CREATE INDEX task_execution_reference_idx ON taskling.task_execution (task_id, reference_value)
    WHERE reference_value IS NOT NULL;
-- The acquire's liveness lookup: the executions that may still hold a slot of the task.
CREATE INDEX task_execution_holders_idx ON taskling.task_execution (task_id)
    WHERE completed_at IS NULL AND token_id IS NOT NULL AND reclaimed_at IS NULL;
-- One execution per cron instant.
CREATE UNIQUE INDEX task_execution_scheduled_for_key ON taskling.task_execution (task_id, scheduled_for)
    WHERE scheduled_for IS NOT NULL;
-- Cleanup by age.
CREATE INDEX task_execution_started_at_idx ON taskling.task_execution (started_at);

CREATE TABLE taskling.task_execution_event (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id    bigint      NOT NULL REFERENCES taskling.task_execution (id) ON DELETE CASCADE,
    -- 1 Start, 2 Checkpoint, 3 Error, 4 End, 5 Blocked.
    event_type      smallint    NOT NULL,
    message         text,
    occurred_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX task_execution_event_execution_idx ON taskling.task_execution_event (execution_id, id);

-- Raised from inside a batched transaction when a check made under a row lock fails (a holder
-- renewed its lease while being reclaimed): the client retries the whole transaction, exactly as
-- it does for a serialization failure, whatever the isolation level.
CREATE FUNCTION taskling.serialization_conflict(msg text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = 'taskling: ' || msg;
END
$$;

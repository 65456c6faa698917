-- Blocks: an execution's work split into durable units (a numeric range, a date range, a list of
-- items, or one JSON object), each with the history of its attempts. A later execution takes
-- again the blocks that failed or whose execution died. The block row keeps its latest attempt's
-- number, status and execution, so that taking a block again is one compare-and-set on that row
-- (two executions never get the same attempt: block_attempt's key), and finding the blocks to
-- take again reads no history.

CREATE TABLE taskling.block (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id      bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    -- 1 numeric range (inclusive), 2 date range (half-open), 3 list, 4 object.
    kind         smallint    NOT NULL CHECK (kind BETWEEN 1 AND 4),
    from_number  bigint,
    to_number    bigint,
    from_date    timestamptz,
    to_date      timestamptz,
    -- An object block's value, or a list block's header.
    value        jsonb,
    item_count   integer     NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- The latest attempt.
    attempts     integer     NOT NULL DEFAULT 1,
    -- 1 not started, 2 started, 3 completed, 4 failed (dead: 1 or 2, its execution not running).
    status       smallint    NOT NULL DEFAULT 1 CHECK (status BETWEEN 1 AND 4),
    execution_id bigint      NOT NULL,
    -- The retry limit of the request that took the latest attempt (the larger of its failed and
    -- dead ones; 0 when it asked for neither): a block not completed, not live, with more
    -- attempts than this is at its retry limit.
    retry_limit  integer     NOT NULL DEFAULT 0,
    CHECK (kind <> 1 OR (from_number IS NOT NULL AND to_number IS NOT NULL AND to_number >= from_number)),
    CHECK (kind <> 2 OR (from_date IS NOT NULL AND to_date IS NOT NULL AND to_date > from_date))
);

-- A range is created once per task, whoever continues from the last one.
CREATE UNIQUE INDEX block_numeric_key ON taskling.block (task_id, from_number) WHERE kind = 1;
CREATE UNIQUE INDEX block_date_key ON taskling.block (task_id, from_date) WHERE kind = 2;
-- Blocks to take again (not completed), oldest first.
CREATE INDEX block_pickup_idx ON taskling.block (task_id, kind, created_at, id) WHERE status <> 3;
CREATE INDEX block_execution_idx ON taskling.block (execution_id);

CREATE TABLE taskling.block_attempt (
    block_id     bigint      NOT NULL REFERENCES taskling.block (id) ON DELETE CASCADE,
    attempt      integer     NOT NULL CHECK (attempt >= 1),
    execution_id bigint      NOT NULL,
    status       smallint    NOT NULL DEFAULT 1 CHECK (status BETWEEN 1 AND 4),
    forced       boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at   timestamptz,
    ended_at     timestamptz,
    items_done   bigint,
    message      text,
    PRIMARY KEY (block_id, attempt)
);
CREATE INDEX block_attempt_execution_idx ON taskling.block_attempt (execution_id, block_id);

CREATE TABLE taskling.list_item (
    block_id   bigint      NOT NULL REFERENCES taskling.block (id) ON DELETE CASCADE,
    n          integer     NOT NULL,
    value      jsonb       NOT NULL,
    -- 1 pending, 2 completed, 3 failed, 4 discarded.
    status     smallint    NOT NULL DEFAULT 1 CHECK (status BETWEEN 1 AND 4),
    reason     text,
    step       smallint,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (block_id, n)
);

-- Blocks an operator asked to run again: the next execution of the task that asks for blocks of
-- that kind takes them first, whatever their status (a running one waits until it is not).
CREATE TABLE taskling.forced_block (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    block_id   bigint      NOT NULL REFERENCES taskling.block (id) ON DELETE CASCADE,
    task_id    bigint      NOT NULL,
    forced_by  text        NOT NULL,
    forced_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    taken_at   timestamptz,
    taken_by   bigint
);
CREATE UNIQUE INDEX forced_block_pending_key ON taskling.forced_block (block_id) WHERE taken_at IS NULL;
CREATE INDEX forced_block_task_idx ON taskling.forced_block (task_id, id) WHERE taken_at IS NULL;

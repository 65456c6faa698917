-- Grant protocol 4: a slot a release frees goes straight to the waiter first in line.
--
-- Before, a release offered the slot to the first ticket of the task's queue and woke its waiter,
-- which then ran a token transaction of its own to take it: two transactions on the task row per
-- handover, and the slot idle for both. Now the release grants the slot to that ticket in its own
-- transaction (the ticket's id becomes the execution's id, its session the holder's) and records
-- the grant here. The waiter takes it by deleting its row here and inserting its execution in one
-- statement, without the task row's lock.
--
-- A grant nobody takes (the waiter died, or hangs) must not hold the slot for a whole death
-- threshold: once lapses_at has passed, the next token transaction on the task locks the row here
-- and takes the slot back, setting lapsed_at. The row's lock decides a race between that and a
-- late take: whichever writes the row first wins, and the other finds nothing to take. A lapsed
-- row stays as the record of a fence handed out that no execution carries (and for operators: a
-- waiter that did not take its slot); the cleanup deletes it after the task's KeepFailed.

CREATE TABLE taskling.handoff (
    exec_id     bigint      PRIMARY KEY,
    task_id     bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    token_id    uuid        NOT NULL,
    fence       bigint      NOT NULL,
    granted_at  timestamptz NOT NULL,
    lapses_at   timestamptz NOT NULL,
    -- The death threshold the holder is judged by (its term in the task row): the waiter's lease.
    death_threshold interval NOT NULL,
    lapsed_at   timestamptz
);

CREATE INDEX handoff_task_idx ON taskling.handoff (task_id, lapsed_at);

UPDATE taskling.protocol SET version = 4, changed_at = clock_timestamp();

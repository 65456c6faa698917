-- Grant protocol 2: liveness per process, a cheaper cycle, and token transactions that read only
-- their own task's rows (so SERIALIZABLE transactions of unrelated tasks never conflict).
--
-- * A session is one client process. It heartbeats its own row (updated in place: no index
--   entry changes) once per interval for all its executions, instead of one write per execution.
-- * The task row keeps, next to its token list, the liveness terms of every execution that may
--   hold a slot (holders: execution, session, grant time, threshold). A holder is alive while the
--   database clock is within its threshold of max(grant time, its session's last heartbeat).
-- * An execution's end (completed, failed, reclaimed) is a row of execution_end,
--   inserted once; the execution row itself is written at the start only.
-- * Idempotent reference values are claimed in reference_claim; a claim that succeeded stays.
-- * Start, Blocked and End events are no longer stored: the execution rows say it.
--
-- Binaries of protocol 1 and older must not grant any more: the protocol is bumped, and the column
-- their token transactions write first is dropped (token transactions now lock the task row with
-- SELECT … FOR UPDATE), so that binaries older than the protocol table fail instead of granting by
-- old rules.

CREATE TABLE taskling.session (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host_name       text        NOT NULL,
    pid             integer     NOT NULL,
    library_version text        NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_heartbeat  timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at       timestamptz
) WITH (fillfactor = 50);

ALTER TABLE taskling.task_definition DROP COLUMN hold_lock_execution_id;
ALTER TABLE taskling.task_definition ADD COLUMN holders text NOT NULL DEFAULT '';
-- Room on each page for the new version of a row: token updates stay HOT (no index entries).
ALTER TABLE taskling.task_definition SET (fillfactor = 10);

ALTER TABLE taskling.task_execution ADD COLUMN session_id bigint;

CREATE TABLE taskling.execution_end (
    execution_id    bigint      PRIMARY KEY,
    ended_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- 1 completed, 2 failed, 3 reclaimed by another requester (judged dead).
    outcome         smallint    NOT NULL CHECK (outcome BETWEEN 1 AND 3),
    -- The holder's last heartbeat on the database clock when it ended.
    last_heartbeat  timestamptz
);

CREATE TABLE taskling.reference_claim (
    task_id         bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    reference_value text        NOT NULL,
    execution_id    bigint      NOT NULL,
    succeeded       boolean     NOT NULL DEFAULT false,
    claimed_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (task_id, reference_value)
);

-- The ends of executions that ended before this version: completions and reclaims.
INSERT INTO taskling.execution_end (execution_id, ended_at, outcome, last_heartbeat)
SELECT id, coalesce(reclaimed_at, completed_at),
       CASE WHEN reclaimed_at IS NOT NULL THEN 3 WHEN failed THEN 2 ELSE 1 END,
       last_keep_alive
FROM taskling.task_execution
WHERE NOT blocked AND (completed_at IS NOT NULL OR reclaimed_at IS NOT NULL);

-- Claims of idempotent references: the latest granted execution of each, succeeded or not.
INSERT INTO taskling.reference_claim (task_id, reference_value, execution_id, succeeded, claimed_at)
SELECT DISTINCT ON (task_id, reference_value) task_id, reference_value, id,
       completed_at IS NOT NULL AND NOT failed AND reclaimed_at IS NULL, started_at
FROM taskling.task_execution
WHERE idempotent AND reference_value IS NOT NULL AND token_id IS NOT NULL
ORDER BY task_id, reference_value,
         (completed_at IS NOT NULL AND NOT failed AND reclaimed_at IS NULL) DESC, id DESC;

-- Indexes nothing reads any more: holders come from the task row. History is ordered by start
-- time (ids are reserved ahead by each process, so they no longer follow start order across
-- hosts); the same index serves cleanup by age, task by task.
DROP INDEX taskling.task_execution_holders_idx;
DROP INDEX taskling.task_execution_started_at_idx;
DROP INDEX taskling.task_execution_task_id_idx;
CREATE INDEX task_execution_task_started_idx ON taskling.task_execution (task_id, started_at DESC, id DESC);

-- Deleting the row of an execution that may hold a slot (by hand) drops its liveness terms from
-- its task row: the next token transaction then judges it by its (missing) row, as dead.
CREATE FUNCTION taskling.forget_deleted_holders() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE taskling.task_definition d
    SET holders = coalesce((
        SELECT string_agg(h, '|' ORDER BY n)
        FROM unnest(string_to_array(d.holders, '|')) WITH ORDINALITY AS x(h, n)
        WHERE NOT EXISTS (SELECT 1 FROM gone g WHERE g.task_id = d.id AND x.h LIKE 'E:' || g.id || ',%')
    ), '')
    WHERE d.id IN (SELECT task_id FROM gone)
      AND EXISTS (SELECT 1 FROM gone g WHERE g.task_id = d.id AND d.holders LIKE '%E:' || g.id || ',%');
    RETURN NULL;
END
$$;
CREATE TRIGGER task_execution_forget_deleted_holders
    AFTER DELETE ON taskling.task_execution
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION taskling.forget_deleted_holders();

UPDATE taskling.protocol SET version = 2, changed_at = clock_timestamp();

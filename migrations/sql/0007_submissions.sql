-- Submissions: durable requests to run a task, taken by any host's Work loop when a slot frees.
-- Each attempt is an execution of its own (its own fence and liveness), listed in
-- submission_attempt. The end of an attempt's execution — completed, failed, or reclaimed because
-- its holder was judged dead — settles the submission in the same transaction (the trigger on
-- execution_end), so no crash between a run and its bookkeeping can lose or repeat a completion.

CREATE TABLE taskling.submission (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id             bigint      NOT NULL REFERENCES taskling.task_definition (id) ON DELETE CASCADE,
    -- 1 waiting, 2 in progress, 3 completed, 4 dead (attempts exhausted), 5 cancelled.
    status              smallint    NOT NULL DEFAULT 1 CHECK (status BETWEEN 1 AND 5),
    priority            integer     NOT NULL DEFAULT 0,
    reference_value     text,
    header              jsonb,
    max_attempts        integer     NOT NULL CHECK (max_attempts >= 1),
    attempts            integer     NOT NULL DEFAULT 0,
    -- The execution of the current (in progress) or last attempt.
    execution_id        bigint,
    -- A waiting submission taken by a worker that waits for a slot for it: the worker's session,
    -- and how long that session may stay silent before the claim lapses.
    claimed_by          bigint,
    claim_threshold     interval,
    last_error          text,
    cancel_requested_at timestamptz,
    cancel_reason       text,
    submitted_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at         timestamptz
);

-- A duplicate reference returns the existing submission.
CREATE UNIQUE INDEX submission_reference_key ON taskling.submission (task_id, reference_value)
    WHERE reference_value IS NOT NULL;
-- The queue: highest priority, then oldest, first.
CREATE INDEX submission_waiting_idx ON taskling.submission (task_id, priority DESC, id) WHERE status = 1;
-- The attempt an execution runs (read when an execution ends, and by heartbeats).
CREATE INDEX submission_running_idx ON taskling.submission (execution_id) WHERE status = 2;
-- Listing a task's submissions, newest first.
CREATE INDEX submission_task_idx ON taskling.submission (task_id, id DESC);

CREATE TABLE taskling.submission_attempt (
    submission_id   bigint      NOT NULL REFERENCES taskling.submission (id) ON DELETE CASCADE,
    attempt         integer     NOT NULL,
    execution_id    bigint      NOT NULL UNIQUE,
    PRIMARY KEY (submission_id, attempt)
);

-- Settles the submissions whose running attempt just ended: completed; cancelled if an operator
-- asked; otherwise back to waiting, or dead once its attempts are spent. Waiting workers are told.
CREATE FUNCTION taskling.settle_submissions() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t bigint;
BEGIN
    FOR t IN
        WITH settled AS (
        UPDATE taskling.submission s
        SET status = CASE WHEN x.outcome = 1 THEN 3
                          WHEN s.cancel_requested_at IS NOT NULL THEN 5
                          WHEN s.attempts >= s.max_attempts THEN 4
                          ELSE 1 END,
            last_error = CASE x.outcome
                WHEN 1 THEN s.last_error
                WHEN 3 THEN 'attempt ' || s.attempts || ' (execution ' || x.execution_id || '): its holder was judged dead and its slot reclaimed'
                ELSE coalesce(s.last_error, 'attempt ' || s.attempts || ' (execution ' || x.execution_id || ') failed') END,
            finished_at = CASE WHEN x.outcome = 1 OR s.cancel_requested_at IS NOT NULL OR s.attempts >= s.max_attempts
                               THEN clock_timestamp() END,
            claimed_by = NULL,
            updated_at = clock_timestamp()
        FROM ended x
        WHERE s.execution_id = x.execution_id AND s.status = 2
        RETURNING s.task_id, s.status
        )
        SELECT DISTINCT task_id FROM settled WHERE status = 1
    LOOP
        PERFORM pg_notify('taskling_slots', 's' || t);
    END LOOP;
    RETURN NULL;
END
$$;
CREATE TRIGGER execution_end_settle_submissions
    AFTER INSERT ON taskling.execution_end
    REFERENCING NEW TABLE AS ended
    FOR EACH STATEMENT EXECUTE FUNCTION taskling.settle_submissions();

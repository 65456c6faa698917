-- Migration 0021: trace context and submission counts. No grant rule changes.
--
-- The caller's trace context (W3C Trace Context: the traceparent and tracestate headers), stored
-- with a submission by Submit and SubmitTx when one is given (package tasklingotel reads it from
-- the caller's context), so that each attempt's span, on whichever host runs it, links to the span
-- that submitted it. NULL: none. Nullable columns without a default: adding them rewrites
-- nothing, and binaries of an older release, which name the columns they insert, keep working.
ALTER TABLE taskling.submission ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- The count of submissions by task and status, which the metrics read at every scrape, kept as a
-- tally: every statement that inserts, deletes or changes the status of submissions adds one row
-- per (task, status) it changed, with the difference (a statement-level trigger over its
-- transition tables: one INSERT per statement, never an UPDATE of a shared row, so concurrent
-- submits never wait for each other, and each delta commits or rolls back with its change). The
-- count of a (task, status) is the sum of its rows; taskling.compact_submission_tally() replaces
-- the rows by their sums (the scrape and the cleanup call it), so the table stays small. Hosts of
-- any release fire the triggers alike.
CREATE TABLE taskling.submission_tally (
    task_id bigint   NOT NULL,
    status  smallint NOT NULL,
    n       bigint   NOT NULL
);

CREATE FUNCTION taskling.tally_inserted_submissions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO taskling.submission_tally (task_id, status, n)
    SELECT task_id, status, count(*) FROM new_rows GROUP BY task_id, status;
    RETURN NULL;
END
$$;

CREATE FUNCTION taskling.tally_deleted_submissions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO taskling.submission_tally (task_id, status, n)
    SELECT task_id, status, -count(*) FROM old_rows GROUP BY task_id, status;
    RETURN NULL;
END
$$;

-- An update changes no task_id; only the rows whose status changed count.
CREATE FUNCTION taskling.tally_updated_submissions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO taskling.submission_tally (task_id, status, n)
    SELECT task_id, status, sum(d) FROM (
        SELECT o.task_id, o.status, -1 AS d FROM old_rows o JOIN new_rows w ON w.id = o.id WHERE w.status <> o.status
        UNION ALL
        SELECT w.task_id, w.status, 1 FROM old_rows o JOIN new_rows w ON w.id = o.id WHERE w.status <> o.status
    ) c
    GROUP BY task_id, status;
    RETURN NULL;
END
$$;

CREATE TRIGGER submission_tally_insert AFTER INSERT ON taskling.submission
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION taskling.tally_inserted_submissions();
CREATE TRIGGER submission_tally_delete AFTER DELETE ON taskling.submission
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION taskling.tally_deleted_submissions();
CREATE TRIGGER submission_tally_update AFTER UPDATE ON taskling.submission
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION taskling.tally_updated_submissions();

-- The submissions of before. Creating the triggers locked the table against writes until this
-- transaction commits, so none is counted twice or missed.
INSERT INTO taskling.submission_tally (task_id, status, n)
SELECT task_id, status, count(*) FROM taskling.submission GROUP BY task_id, status;

-- Replaces the tally's rows by one per (task, status) whose sum is not zero, unless another
-- compaction runs (then it does nothing and returns -1); returns the rows it replaced. Rows that
-- transactions still in flight add are not visible to it and stay for the next compaction.
CREATE FUNCTION taskling.compact_submission_tally() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    replaced bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('taskling.submission_tally')) THEN
        RETURN -1;
    END IF;
    WITH gone AS (
        DELETE FROM taskling.submission_tally RETURNING task_id, status, n
    ), sums AS (
        INSERT INTO taskling.submission_tally (task_id, status, n)
        SELECT task_id, status, sum(n) FROM gone GROUP BY task_id, status HAVING sum(n) <> 0
    )
    SELECT count(*) INTO replaced FROM gone;
    RETURN replaced;
END
$$;

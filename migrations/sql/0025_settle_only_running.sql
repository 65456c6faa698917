-- The settlement trigger on taskling.execution_end skips endings that have no running submission
-- (issue 25, part B; docs/upgrading.md).
--
-- Every ending statement fired it, and it ran taskling.settle_attempts whether or not a submission
-- was attempted by the executions ended: an UPDATE that matched nothing, and behind it the
-- submission counts' statement trigger, firing for zero rows (about 0.5 ms of the server's CPU per
-- ending; most executions are not attempts of submissions). Now it first keeps the endings of
-- executions that a running submission names, by submission_running_idx (an index-only look), and
-- returns when there are none. An execution's submission is marked running, with its execution,
-- in the transaction that starts it, which commits before the execution can end: the look never
-- misses one the settlement would have found. Same settlement otherwise; grant protocol unchanged.

CREATE OR REPLACE FUNCTION taskling.settle_submissions() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    executions bigint[];
    outcomes smallint[];
    t bigint;
BEGIN
    SELECT array_agg(e.execution_id), array_agg(e.outcome) INTO executions, outcomes FROM ended e
    WHERE EXISTS (SELECT 1 FROM taskling.submission s
                  WHERE s.execution_id = e.execution_id AND s.status = taskling.submission_status('in_progress'));
    IF executions IS NULL THEN
        RETURN NULL;
    END IF;
    FOR t IN SELECT s.task_id FROM taskling.settle_attempts(executions, outcomes) s
    LOOP
        PERFORM pg_notify('taskling_slots', 's' || t);
    END LOOP;
    RETURN NULL;
END
$$;

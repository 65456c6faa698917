-- The settlement trigger on taskling.execution_end returns at once when no running submission
-- names the executions ended (issue 25, part B; docs/upgrading.md).
--
-- Every ending statement fired it, and it ran taskling.settle_attempts whether or not a submission
-- was attempted by the executions ended: an UPDATE that matched nothing, and behind it the
-- submission counts' statement trigger, firing for zero rows (the ending insert took 0.47 ms of
-- the server, 0.20 ms with this; most executions are not attempts of submissions). Now it first
-- looks for a running submission of those executions, by submission_running_idx with the
-- executions as an array (an index condition whatever the number of endings, as 0018 made the
-- settlement's own look up), and returns when there is none. An execution's submission is marked
-- running, with its execution, in the transaction that inserts the execution, which commits before
-- the execution can end: the look never misses one the settlement would have found. Same
-- settlement otherwise; grant protocol unchanged.

CREATE OR REPLACE FUNCTION taskling.settle_submissions() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    executions bigint[];
    outcomes smallint[];
    t bigint;
BEGIN
    SELECT array_agg(e.execution_id), array_agg(e.outcome) INTO executions, outcomes FROM ended e;
    IF NOT EXISTS (SELECT 1 FROM taskling.submission s
                   WHERE s.execution_id = ANY(executions) AND s.status = taskling.submission_status('in_progress')) THEN
        RETURN NULL;
    END IF;
    FOR t IN SELECT s.task_id FROM taskling.settle_attempts(executions, outcomes) s
    LOOP
        PERFORM pg_notify('taskling_slots', 's' || t);
    END LOOP;
    RETURN NULL;
END
$$;

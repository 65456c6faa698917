-- The settlement of a submission's attempt (migration 0018) as PL/pgSQL. PostgreSQL 15 plans the
-- body of a SQL function that cannot be inlined (this one updates) at every call of the statement
-- that calls it, and the trigger on execution_end calls it once per ending: every completion of
-- every task paid about a millisecond of planning, five times the insert it followed. A PL/pgSQL
-- function keeps its plan for the session. Same statement, same result; no grant rule changes.
CREATE OR REPLACE FUNCTION taskling.settle_attempts(executions bigint[], outcomes smallint[])
RETURNS TABLE (task_id bigint) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH x AS (SELECT * FROM unnest(executions, outcomes) AS x(execution_id, outcome)),
    settled AS (
        UPDATE taskling.submission s
        SET status = CASE WHEN x.outcome = taskling.end_outcome('completed') THEN taskling.submission_status('completed')
                          WHEN s.cancel_requested_at IS NOT NULL THEN taskling.submission_status('cancelled')
                          WHEN s.attempts >= s.max_attempts THEN taskling.submission_status('dead')
                          ELSE taskling.submission_status('waiting') END,
            last_error = CASE x.outcome
                WHEN taskling.end_outcome('completed') THEN s.last_error
                WHEN taskling.end_outcome('reclaimed') THEN 'attempt ' || s.attempts || ' (execution ' || x.execution_id || '): its holder was judged dead and its slot reclaimed'
                ELSE coalesce(s.last_error, 'attempt ' || s.attempts || ' (execution ' || x.execution_id || ') failed') END,
            finished_at = CASE WHEN x.outcome = taskling.end_outcome('completed') OR s.cancel_requested_at IS NOT NULL
                                    OR s.attempts >= s.max_attempts
                               THEN clock_timestamp() END,
            claimed_by = NULL,
            updated_at = clock_timestamp()
        FROM x
        WHERE s.execution_id = ANY(executions) AND s.execution_id = x.execution_id
          AND s.status = taskling.submission_status('in_progress')
        RETURNING s.task_id AS settled_task, s.status AS settled_status
    )
    SELECT DISTINCT settled.settled_task FROM settled WHERE settled.settled_status = taskling.submission_status('waiting');
END
$$;

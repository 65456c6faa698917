-- Named values and shared rules (issue 24). The smallint codes stored in the status columns are
-- named here, once: each function maps a name to its code, and as it is IMMUTABLE a statement
-- that calls it with a constant gets the constant when it is planned (a partial index whose
-- predicate says `status = 2` still serves `status = taskling.submission_status('in_progress')`).
-- An unknown name is an error. The Go constants of internal/codes name the same codes, and a test
-- checks that the two agree.
--
-- The rules several statements share are functions too: whether an execution is alive, its
-- status, and how the end of an attempt settles its submission. They are SQL functions of one
-- expression or statement, so the planner inlines them where they are called.
--
-- No grant rule changes: the token transactions judge liveness in Go (package tokens), and
-- binaries of grant protocol 4 keep working against this schema. A function that older binaries
-- also use changes only with a protocol version bump.

CREATE FUNCTION taskling.unknown_name(domain text, name text) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE EXCEPTION 'taskling: % has no value named %', domain, quote_nullable(name);
END
$$;

CREATE FUNCTION taskling.end_outcome(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'completed' THEN 1 WHEN 'failed' THEN 2 WHEN 'reclaimed' THEN 3
    ELSE taskling.unknown_name('end_outcome', name) END::smallint
$$;

CREATE FUNCTION taskling.submission_status(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'waiting' THEN 1 WHEN 'in_progress' THEN 2 WHEN 'completed' THEN 3 WHEN 'dead' THEN 4
    WHEN 'cancelled' THEN 5 ELSE taskling.unknown_name('submission_status', name) END::smallint
$$;

CREATE FUNCTION taskling.block_status(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'not_started' THEN 1 WHEN 'started' THEN 2 WHEN 'completed' THEN 3 WHEN 'failed' THEN 4
    ELSE taskling.unknown_name('block_status', name) END::smallint
$$;

CREATE FUNCTION taskling.block_kind(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'numeric' THEN 1 WHEN 'date' THEN 2 WHEN 'list' THEN 3 WHEN 'object' THEN 4
    ELSE taskling.unknown_name('block_kind', name) END::smallint
$$;

CREATE FUNCTION taskling.item_status(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'pending' THEN 1 WHEN 'completed' THEN 2 WHEN 'failed' THEN 3 WHEN 'discarded' THEN 4
    ELSE taskling.unknown_name('item_status', name) END::smallint
$$;

CREATE FUNCTION taskling.death_mode(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'keep_alive' THEN 1 WHEN 'override' THEN 2
    ELSE taskling.unknown_name('death_mode', name) END::smallint
$$;

CREATE FUNCTION taskling.event_type(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'start' THEN 1 WHEN 'checkpoint' THEN 2 WHEN 'error' THEN 3 WHEN 'end' THEN 4
    WHEN 'blocked' THEN 5 ELSE taskling.unknown_name('event_type', name) END::smallint
$$;

CREATE FUNCTION taskling.schedule_event(name text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE name WHEN 'skipped' THEN 1 WHEN 'expired' THEN 2 WHEN 'disabled' THEN 3 WHEN 'registered' THEN 4
    WHEN 'changed' THEN 5 WHEN 'retired' THEN 6 ELSE taskling.unknown_name('schedule_event', name) END::smallint
$$;

-- schedule_event_name names a schedule event kind code: the inverse of schedule_event.
CREATE FUNCTION taskling.schedule_event_name(code smallint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT (ARRAY['skipped', 'expired', 'disabled', 'registered', 'changed', 'retired'])[code]
$$;

-- holder_alive judges execution e, whose session last renewed its heartbeat at heartbeat (NULL:
-- no session row), on the database clock at this moment: dead strictly after its threshold.
-- Override mode: from its start. KeepAlive mode: from the later of its start and its session's
-- heartbeat; a row of protocol 1 (no session) by its own heartbeat column.
CREATE FUNCTION taskling.holder_alive(e taskling.task_execution, heartbeat timestamptz) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
SELECT CASE WHEN e.death_mode <> taskling.death_mode('keep_alive') THEN clock_timestamp() - e.started_at <= e.override_threshold
    WHEN e.session_id IS NOT NULL THEN clock_timestamp() - greatest(e.started_at, heartbeat) <= e.keep_alive_death_threshold
    ELSE clock_timestamp() - e.last_keep_alive <= e.keep_alive_death_threshold END
$$;

-- execution_status derives the status of execution e, with its end x (NULL: none) and its
-- session's heartbeat: in_progress, completed, failed, blocked or dead. A reclaimed execution is
-- dead even if it later completed: its slot was given to another while it may have been running.
CREATE FUNCTION taskling.execution_status(e taskling.task_execution, x taskling.execution_end, heartbeat timestamptz)
RETURNS text LANGUAGE sql VOLATILE AS $$
SELECT CASE
    WHEN e.blocked THEN 'blocked'
    WHEN e.reclaimed_at IS NOT NULL OR x.outcome = taskling.end_outcome('reclaimed') THEN 'dead'
    WHEN x.outcome = taskling.end_outcome('failed') OR (x.outcome IS NOT NULL AND e.failed) THEN 'failed'
    WHEN x.outcome IS NOT NULL THEN 'completed'
    WHEN e.completed_at IS NOT NULL AND e.failed THEN 'failed'
    WHEN e.completed_at IS NOT NULL THEN 'completed'
    WHEN taskling.holder_alive(e, heartbeat) THEN 'in_progress'
    ELSE 'dead' END
$$;

-- execution_completed_at is when execution e completed or failed, by its end x (a denied start
-- ends as it starts); NULL while it runs, and for a reclaimed one.
CREATE FUNCTION taskling.execution_completed_at(e taskling.task_execution, x taskling.execution_end)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
SELECT CASE WHEN e.blocked THEN e.completed_at
    WHEN x.outcome IN (taskling.end_outcome('completed'), taskling.end_outcome('failed')) THEN x.ended_at
    ELSE e.completed_at END
$$;

-- execution_reclaimed_at is when execution e's slot was taken from it (NULL: never).
CREATE FUNCTION taskling.execution_reclaimed_at(e taskling.task_execution, x taskling.execution_end)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
SELECT coalesce(e.reclaimed_at, CASE WHEN x.outcome = taskling.end_outcome('reclaimed') THEN x.ended_at END)
$$;

-- execution_last_heartbeat is the last sign of life of execution e: the one its end recorded,
-- else its session's heartbeat (or its start, if later), else its own column (protocol 1).
CREATE FUNCTION taskling.execution_last_heartbeat(e taskling.task_execution, x taskling.execution_end, heartbeat timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
SELECT CASE WHEN x.execution_id IS NOT NULL THEN coalesce(x.last_heartbeat, e.last_keep_alive)
    WHEN e.session_id IS NOT NULL THEN greatest(e.started_at, heartbeat)
    ELSE e.last_keep_alive END
$$;

-- execution_slot_end is when execution e stopped holding its slot: its reclaim, its end, its
-- completion (rows of protocol 1), or — dead but not yet reclaimed — its last heartbeat. NULL
-- while it runs.
CREATE FUNCTION taskling.execution_slot_end(e taskling.task_execution, x taskling.execution_end, heartbeat timestamptz)
RETURNS timestamptz LANGUAGE sql VOLATILE AS $$
SELECT coalesce(taskling.execution_reclaimed_at(e, x), x.ended_at, e.completed_at,
    CASE WHEN taskling.execution_status(e, x, heartbeat) = 'dead' THEN taskling.execution_last_heartbeat(e, x, heartbeat) END)
$$;

-- execution_running says whether execution runs: its row exists and its status is
-- in_progress (not ended, not reclaimed, alive). A block's latest attempt is live while its
-- execution runs.
CREATE FUNCTION taskling.execution_running(execution bigint) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
SELECT EXISTS (SELECT 1 FROM taskling.task_execution e
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id
    WHERE e.id = execution AND taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress')
$$;

-- block_status_name names a block status code: the inverse of block_status.
CREATE FUNCTION taskling.block_status_name(code smallint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT (ARRAY['not_started', 'started', 'completed', 'failed'])[code]
$$;

-- block_live: block b's latest attempt has not ended and its execution runs. A block that is not
-- live and not completed may be taken again (dead, or failed).
CREATE FUNCTION taskling.block_live(b taskling.block) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
SELECT b.status IN (taskling.block_status('not_started'), taskling.block_status('started'))
    AND taskling.execution_running(b.execution_id)
$$;

-- block_at_retry_limit: block b is not completed, not live, and had more attempts than its
-- retry limit: nobody takes it again by itself.
CREATE FUNCTION taskling.block_at_retry_limit(b taskling.block) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
SELECT b.status <> taskling.block_status('completed') AND b.attempts > b.retry_limit AND NOT taskling.block_live(b)
$$;

-- block_owner_started_at is when block b's latest attempt's execution started (the block's
-- creation if that row is gone): what a retry rule's window is measured from.
CREATE FUNCTION taskling.block_owner_started_at(b taskling.block) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
SELECT coalesce((SELECT e.started_at FROM taskling.task_execution e WHERE e.id = b.execution_id), b.created_at)
$$;

-- block_units is block b's weight in its execution's progress: its numbers, its items, or one.
CREATE FUNCTION taskling.block_units(b taskling.block) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
SELECT CASE b.kind WHEN taskling.block_kind('numeric') THEN b.to_number - b.from_number + 1
    WHEN taskling.block_kind('list') THEN b.item_count ELSE 1 END::bigint
$$;

-- live_tickets lists the live tickets of a task's queue column (alive while their session's
-- heartbeat, or their queueing, is within their threshold), with n their place in it. The queue
-- holds "W:<ticket>,P:<session>,R:<priority>,Q:<queued µs>,D:<threshold µs>…|…".
CREATE FUNCTION taskling.live_tickets(queue text)
RETURNS TABLE (ticket bigint, priority integer, host text, queued timestamptz, n bigint)
LANGUAGE sql VOLATILE AS $$
SELECT q.ticket, q.priority, coalesce(s.host_name, ''), q.queued, q.n
FROM (SELECT (regexp_match(t, 'W:([0-9]+)'))[1]::bigint AS ticket,
             (regexp_match(t, 'P:([0-9]+)'))[1]::bigint AS session,
             (regexp_match(t, 'R:(-?[0-9]+)'))[1]::integer AS priority,
             timestamptz 'epoch' + (regexp_match(t, 'Q:([0-9]+)'))[1]::bigint * interval '1 microsecond' AS queued,
             (regexp_match(t, 'D:([0-9]+)'))[1]::bigint * interval '1 microsecond' AS threshold,
             x.n
      FROM unnest(string_to_array(nullif(queue, ''), '|')) WITH ORDINALITY AS x(t, n)) q
LEFT JOIN taskling.session s ON s.id = q.session
WHERE clock_timestamp() - greatest(q.queued, s.last_heartbeat) <= q.threshold
$$;

-- lock_task_forces takes the lock that orders the forces of task's blocks and its cleanup
-- batches, until the transaction ends: a batch reads the forces only after taking it, so a force
-- committed before is seen (its block kept), and a force that waited for a batch finds its block
-- gone. (Advisory lock keys "tkfc" and the task id; taken in a statement of its own, since a
-- statement's snapshot is taken before it waits.)
CREATE FUNCTION taskling.lock_task_forces(task bigint) RETURNS void
LANGUAGE sql VOLATILE AS $$
SELECT pg_advisory_xact_lock(1953195619, (task & 2147483647)::integer)
$$;

-- cleanup_candidates selects the executions of task that retention (keep_completed, keep_failed,
-- keep_blocked) lets go, oldest first, after the keyset position (after_at, after_id), at most n,
-- with their class: 1 completed, 2 failed or dead, 3 blocked. Protected: an execution that has not
-- ended (a live holder, or one not yet judged dead), the task's latest execution and its latest
-- scheduled one (the schedule's last run) unless the task is retired (its history then goes
-- entirely, by age), the execution of a block not completed (it may be retaken, and is shown with
-- its attempt) or of a completed block with a pending force (it will be taken again: the force,
-- its block and the attempt stay until then), and attempts of submissions still waiting or
-- running. The one definition of what a cleanup may delete: a batch deletes them, a dry run
-- counts them.
CREATE FUNCTION taskling.cleanup_candidates(task bigint, keep_completed interval, keep_failed interval,
    keep_blocked interval, after_at timestamptz, after_id bigint, n integer)
RETURNS TABLE (id bigint, started_at timestamptz, scheduled_for timestamptz, reference_value text, class integer)
LANGUAGE sql VOLATILE AS $$
SELECT e.id, e.started_at, e.scheduled_for, e.reference_value,
       CASE WHEN e.blocked THEN 3 WHEN x.outcome = taskling.end_outcome('completed') AND NOT e.failed THEN 1 ELSE 2 END AS class
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
WHERE e.task_id = task
  AND e.started_at < clock_timestamp() - least(keep_completed, keep_failed, keep_blocked)
  AND (e.started_at, e.id) > (after_at, after_id)
  AND CASE WHEN e.blocked THEN e.started_at < clock_timestamp() - keep_blocked
           WHEN x.execution_id IS NULL THEN false
           WHEN x.outcome = taskling.end_outcome('completed') AND NOT e.failed THEN x.ended_at < clock_timestamp() - keep_completed
           ELSE x.ended_at < clock_timestamp() - keep_failed END
  AND (EXISTS (SELECT 1 FROM taskling.task_definition r WHERE r.id = task AND r.retired_at IS NOT NULL)
       OR e.id <> ALL (ARRAY(
        (SELECT l.id FROM taskling.task_execution l WHERE l.task_id = task ORDER BY l.started_at DESC, l.id DESC LIMIT 1)
        UNION ALL
        (SELECT l.id FROM taskling.task_execution l WHERE l.task_id = task AND l.scheduled_for IS NOT NULL
         ORDER BY l.scheduled_for DESC LIMIT 1))))
  AND NOT EXISTS (SELECT 1 FROM taskling.block b WHERE b.execution_id = e.id
                  AND (b.status <> taskling.block_status('completed') OR EXISTS (SELECT 1 FROM taskling.forced_block f WHERE f.block_id = b.id AND f.taken_at IS NULL)))
  AND NOT EXISTS (SELECT 1 FROM taskling.submission_attempt a JOIN taskling.submission s ON s.id = a.submission_id
                  WHERE a.execution_id = e.id AND s.status IN (taskling.submission_status('waiting'), taskling.submission_status('in_progress')))
ORDER BY e.started_at, e.id
LIMIT n
$$;

-- task_slots computes, for task d, the slots in use by live executions and the number of slots
-- (the limit in force, or the token list's when nothing was declared), from its token list and
-- the executions that may hold a slot (an unlimited task's are in its holders column).
CREATE FUNCTION taskling.task_slots(d taskling.task_definition) RETURNS TABLE (used bigint, total integer)
LANGUAGE sql VOLATILE AS $$
SELECT CASE WHEN k.unlimited THEN (
            SELECT count(*) FROM taskling.task_execution e
            LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
            LEFT JOIN taskling.session s ON s.id = e.session_id
            WHERE e.id IN (SELECT m[1]::bigint FROM regexp_matches(d.tokens || '|' || d.holders, '(?:G|E):([0-9]+)', 'g') m)
              AND taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress')
        ELSE (
            SELECT count(*) FROM taskling.task_execution e
            LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
            LEFT JOIN taskling.session s ON s.id = e.session_id
            JOIN unnest(k.grantees) g(id) ON g.id = e.id
            WHERE taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress') END,
       CASE WHEN d.concurrency_limit IS NOT NULL THEN d.concurrency_limit
            WHEN d.declared_limit IS NOT NULL THEN d.declared_limit
            WHEN k.unlimited THEN -1 ELSE k.sized::integer END
FROM (SELECT coalesce(bool_and(t.s = '3') AND count(*) = 1, false) AS unlimited,
             count(*) FILTER (WHERE t.s IN ('0', '1')) AS sized,
             coalesce(array_agg(t.g) FILTER (WHERE t.s IN ('0', '2') AND t.g <> 0), '{}') AS grantees
      FROM (SELECT (regexp_match(x, 'S:([0-9])'))[1] AS s, (regexp_match(x, 'G:([0-9]+)'))[1]::bigint AS g
            FROM unnest(string_to_array(nullif(d.tokens, ''), '|')) x) t) k
$$;

-- task_state is each task with what the task list filters and sorts by: its slots in use and in
-- all, its live waiters, whether every slot of a limited task is in use, whether it is retired.
CREATE VIEW taskling.task_state AS
SELECT d.id, d.application_name, d.task_name, k.used::integer AS used, k.total AS total,
    w.waiting::integer AS waiting, k.total > 0 AND k.used >= k.total AS at_limit, d.retired_at IS NOT NULL AS retired
FROM taskling.task_definition d
CROSS JOIN LATERAL taskling.task_slots(d) k
CROSS JOIN LATERAL (SELECT count(*) AS waiting FROM taskling.live_tickets(d.queue)) w;

-- task_summary is each task as a task list shows it: its row (names, tokens, fence, overrides,
-- declaration and retirement), a disagreement of its hosts' declared limits in the last 10
-- minutes, the executions that may hold its slots and whether each does (by primary key), its
-- newest execution (task_execution_task_started_idx), its live waiters and the oldest one's
-- queueing, its schedule's retirement and what its hosts declared beyond the limit. A statement
-- that selects a few tasks from it computes those for them only.
CREATE VIEW taskling.task_summary AS
SELECT d.id, d.application_name, d.task_name, d.tokens, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.overrides_updated_at, d.declared_limit, d.declared_by,
    dd.other_limit, dd.other_host, dd.at AS dispute_at,
    coalesce(h.ids, '{}') AS holder_ids, coalesce(h.alive, '{}') AS holder_alive,
    l.id AS last_id, l.status AS last_status, l.started_at AS last_started_at, w.waiting, w.oldest,
    d.retired_at, d.retired_by, d.retired_enabled, sc.task_id IS NOT NULL AS has_schedule,
    sc.retired_at AS schedule_retired_at, sc.retired_by AS schedule_retired_by,
    td.enabled AS declared_enabled, td.death_mode AS declared_death_mode, td.keep_alive_interval AS declared_interval,
    td.keep_alive_death_threshold AS declared_threshold, td.override_threshold AS declared_override_threshold,
    td.declared_by AS declaration_by, td.declared_at AS declaration_at
FROM taskling.task_definition d
LEFT JOIN taskling.schedule sc ON sc.task_id = d.id
LEFT JOIN taskling.task_declaration td ON td.task_id = d.id
LEFT JOIN taskling.declaration_dispute dd ON dd.task_id = d.id AND clock_timestamp() - dd.at < interval '10 minutes'
LEFT JOIN LATERAL (
    SELECT count(*) AS waiting, min(q.queued) AS oldest FROM taskling.live_tickets(d.queue) q
) w ON true
LEFT JOIN LATERAL (
    SELECT array_agg(e.id ORDER BY e.id) AS ids,
           array_agg(taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress' ORDER BY e.id) AS alive
    FROM taskling.task_execution e
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id
    WHERE e.id IN (SELECT m[1]::bigint FROM regexp_matches(d.tokens || '|' || d.holders, '(?:G|E):([0-9]+)', 'g') m)
) h ON true
LEFT JOIN LATERAL (
    SELECT e.id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at
    FROM taskling.task_execution e
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id
    WHERE e.task_id = d.id
    ORDER BY e.started_at DESC, e.id DESC
    LIMIT 1
) l ON true;

-- settle_attempts settles the submissions whose running attempt ran under one of the
-- executions ended (each with its end's outcome): completed; cancelled if an operator asked;
-- otherwise back to waiting, or dead once its attempts are spent. It returns the tasks of those
-- back to waiting, whose idle workers are to be told. The one definition of the settlement: the
-- trigger on execution_end calls it, and so does a worker that finds attempts whose end went
-- unsettled.
CREATE FUNCTION taskling.settle_attempts(executions bigint[], outcomes smallint[])
RETURNS TABLE (task_id bigint) LANGUAGE sql VOLATILE AS $$
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
    RETURNING s.task_id, s.status
)
SELECT DISTINCT settled.task_id FROM settled WHERE settled.status = taskling.submission_status('waiting')
$$;

-- The trigger settles through settle_attempts, which looks the submissions up by the executions
-- ended (an index condition: the trigger's join had scanned every running submission, which
-- under SERIALIZABLE read other tasks' submissions).
CREATE OR REPLACE FUNCTION taskling.settle_submissions() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    executions bigint[];
    outcomes smallint[];
    t bigint;
BEGIN
    SELECT array_agg(e.execution_id), array_agg(e.outcome) INTO executions, outcomes FROM ended e;
    FOR t IN SELECT s.task_id FROM taskling.settle_attempts(executions, outcomes) s
    LOOP
        PERFORM pg_notify('taskling_slots', 's' || t);
    END LOOP;
    RETURN NULL;
END
$$;

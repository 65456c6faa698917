package execution

// Compatibility with a schema older than keys (grant protocol 5, before migration 0022): a binary
// of this release serves such a database during a rolling upgrade, until it is migrated, by the
// statements of protocol 5 — keyed starts are refused there. Delete this file, and the keys
// feature check that picks it (epoch.go), once the oldest schema supported is 0022.

// p5LockTasksSQL is lockTasksSQL on a schema before 0022 (no keys).
const p5LockTasksSQL = `
SELECT d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text
FROM taskling.task_definition d
WHERE d.id = ANY($1)
ORDER BY d.id
FOR NO KEY UPDATE OF d`

// p5UpdateTasksSQL is updateTasksSQL on a schema before 0022 (no keys).
const p5UpdateTasksSQL = `
UPDATE taskling.task_definition d SET
    tokens = u.tokens,
    queue = u.queue,
    holders = replace(u.holders, 'A:@', 'A:' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
    fence = u.fence,
    declared_at = CASE WHEN u.declared_limit IS NOT NULL
                        AND (d.declared_limit IS DISTINCT FROM u.declared_limit OR d.declared_by IS DISTINCT FROM u.declared_by)
                       THEN clock_timestamp() ELSE d.declared_at END,
    declared_limit = coalesce(u.declared_limit, d.declared_limit),
    declared_by = coalesce(u.declared_by, d.declared_by),
    waiters_until = CASE WHEN u.mark THEN greatest(d.waiters_until, clock_timestamp() + interval '60 seconds')
                         ELSE d.waiters_until END
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue)
WHERE d.id = ANY($1) AND d.id = u.id
RETURNING d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text`

// p5CasTasksSQL is casTasksSQL on a schema before 0022 (no keys).
const p5CasTasksSQL = `
UPDATE taskling.task_definition d SET
    tokens = u.tokens,
    queue = u.queue,
    holders = replace(u.holders, 'A:@', 'A:' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
    fence = u.fence,
    declared_at = CASE WHEN u.declared_limit IS NOT NULL
                        AND (d.declared_limit IS DISTINCT FROM u.declared_limit OR d.declared_by IS DISTINCT FROM u.declared_by)
                       THEN clock_timestamp() ELSE d.declared_at END,
    declared_limit = coalesce(u.declared_limit, d.declared_limit),
    declared_by = coalesce(u.declared_by, d.declared_by),
    waiters_until = CASE WHEN u.mark THEN greatest(d.waiters_until, clock_timestamp() + interval '60 seconds')
                         ELSE d.waiters_until END
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[], $9::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue, xmin)
WHERE d.id = ANY($1) AND d.id = u.id AND d.xmin = u.xmin::xid AND (SELECT version FROM taskling.protocol WHERE singleton) = $10
    AND d.id IN (SELECT l.id FROM taskling.task_definition l WHERE l.id = ANY($1) FOR UPDATE SKIP LOCKED)
    AND EXISTS (SELECT 1 FROM taskling.epoch e WHERE e.timeline = $11 AND e.timeline = taskling.timeline())
RETURNING d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text`

// p5InsertExecutionsSQL is insertExecutionsSQL on a schema before 0022 (no keys).
const p5InsertExecutionsSQL = `
INSERT INTO taskling.task_execution (
    id, task_id, started_at, completed_at, last_keep_alive, host_name, session_id,
    death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, token_id, fence,
    scheduled_for, library_version)
SELECT r.id, r.task, clock_timestamp(), CASE WHEN r.blocked THEN clock_timestamp() END, clock_timestamp(), r.host,
    nullif(r.session, 0), r.mode, r.kai, r.kadt, r.ot, r.ref, r.idem, r.header::jsonb, r.blocked, r.reason, r.token::uuid,
    r.fence, r.sched, $1
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::smallint[], $7::interval[], $8::interval[],
            $9::interval[], $10::text[], $11::boolean[], $12::text[], $13::boolean[], $14::text[], $15::text[],
            $16::bigint[], $17::timestamptz[])
    AS r(id, task, host, session, mode, kai, kadt, ot, ref, idem, header, blocked, reason, token, fence, sched)
ORDER BY r.fence NULLS LAST, r.id
RETURNING id, started_at`

// p5FastInsertExecutionsSQL is fastInsertExecutionsSQL on a schema before 0022 (no keys).
const p5FastInsertExecutionsSQL = `
INSERT INTO taskling.task_execution (
    id, task_id, started_at, completed_at, last_keep_alive, host_name, session_id,
    death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, token_id, fence,
    scheduled_for, library_version)
SELECT r.id, r.task, clock_timestamp(), CASE WHEN r.blocked THEN clock_timestamp() END, clock_timestamp(), r.host,
    nullif(r.session, 0), r.mode, r.kai, r.kadt, r.ot, r.ref, r.idem, r.header::jsonb, r.blocked, r.reason, r.token::uuid,
    r.fence, r.sched, $1
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::smallint[], $7::interval[], $8::interval[],
            $9::interval[], $10::text[], $11::boolean[], $12::text[], $13::boolean[], $14::text[], $15::text[],
            $16::bigint[], $17::timestamptz[])
    AS r(id, task, host, session, mode, kai, kadt, ot, ref, idem, header, blocked, reason, token, fence, sched)
WHERE r.task IN (SELECT w.id FROM taskling.task_definition w
    WHERE w.id = ANY($3::bigint[]) AND w.xmin = pg_current_xact_id_if_assigned()::xid)
ORDER BY r.fence NULLS LAST, r.id
RETURNING id, started_at`

const p5InsertBlockedSQL = `
INSERT INTO taskling.task_execution (
    task_id, started_at, completed_at, last_keep_alive, host_name, session_id, death_mode,
    keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, scheduled_for, library_version)
VALUES ($1, clock_timestamp(), clock_timestamp(), clock_timestamp(), $2, nullif($3, 0), $4, $5, $6, $7,
    $8, $9, $10, true, $11, $12, $13)
RETURNING id`

// p5InsertHandoffsSQL is insertHandoffsSQL on a schema before 0022 (no keys).
const p5InsertHandoffsSQL = `
INSERT INTO taskling.handoff (exec_id, task_id, token_id, fence, granted_at, lapses_at, death_threshold)
SELECT r.exec, r.task, r.token::uuid, r.fence, clock_timestamp(), clock_timestamp() + r.window_us * interval '1 microsecond',
    r.threshold_us * interval '1 microsecond'
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[])
    AS r(exec, task, token, fence, window_us, threshold_us)
ORDER BY r.fence`

// p5TakeHandoffSQL is takeHandoffSQL on a schema before 0022 (no keys).
const p5TakeHandoffSQL = `
WITH h AS (DELETE FROM taskling.handoff WHERE exec_id = $1 AND task_id = $2 AND lapsed_at IS NULL
           RETURNING exec_id, token_id, fence, granted_at, death_threshold),
e AS (
    INSERT INTO taskling.task_execution (
        id, task_id, started_at, last_keep_alive, host_name, session_id,
        death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
        reference_value, idempotent, header, blocked, token_id, fence, library_version)
    SELECT h.exec_id, $2, h.granted_at, clock_timestamp(), $3, $4, $5, $6, h.death_threshold, $7,
        $8, false, $9::jsonb, false, h.token_id, h.fence, $10
    FROM h
    RETURNING id, token_id, fence, started_at, keep_alive_death_threshold),
s AS (
    UPDATE taskling.submission s
    SET status = $12::smallint, attempts = s.attempts + 1, execution_id = e.id, claimed_by = NULL, updated_at = clock_timestamp()
    FROM e WHERE s.id = $11 AND s.status = $13::smallint AND s.claimed_by = $4
    RETURNING s.id, s.attempts, e.id AS exec),
a AS (INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id) SELECT id, attempts, exec FROM s RETURNING attempt)
SELECT e.id, e.token_id, e.fence, e.started_at, e.keep_alive_death_threshold, coalesce((SELECT attempt FROM a), 0) FROM e`

// p5HandoffCasTasksSQL is p5CasTasksSQL on a schema with handoffs (0013): no grant to a ticket may
// be pending (casTasksSQL).
const p5HandoffCasTasksSQL = `
UPDATE taskling.task_definition d SET
    tokens = u.tokens,
    queue = u.queue,
    holders = replace(u.holders, 'A:@', 'A:' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
    fence = u.fence,
    declared_at = CASE WHEN u.declared_limit IS NOT NULL
                        AND (d.declared_limit IS DISTINCT FROM u.declared_limit OR d.declared_by IS DISTINCT FROM u.declared_by)
                       THEN clock_timestamp() ELSE d.declared_at END,
    declared_limit = coalesce(u.declared_limit, d.declared_limit),
    declared_by = coalesce(u.declared_by, d.declared_by),
    waiters_until = CASE WHEN u.mark THEN greatest(d.waiters_until, clock_timestamp() + interval '60 seconds')
                         ELSE d.waiters_until END
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[], $9::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue, xmin)
WHERE d.id = ANY($1) AND d.id = u.id AND d.xmin = u.xmin::xid AND (SELECT version FROM taskling.protocol WHERE singleton) = $10
    AND d.id IN (SELECT l.id FROM taskling.task_definition l WHERE l.id = ANY($1) FOR UPDATE SKIP LOCKED)
    AND EXISTS (SELECT 1 FROM taskling.epoch e WHERE e.timeline = $11 AND e.timeline = taskling.timeline())
    AND NOT EXISTS (SELECT 1 FROM taskling.handoff h WHERE h.task_id = d.id AND h.lapsed_at IS NULL)
RETURNING d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text`

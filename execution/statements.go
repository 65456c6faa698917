package execution

// The statements of the grant protocol, each written out whole. Under SERIALIZABLE, the token
// transactions read only rows that no token transaction of another task writes — their own task
// rows, their holders' sessions (written by heartbeats, at READ COMMITTED), their reference claims
// — and name their tasks' ids as index conditions, so that unrelated tasks never conflict;
// everything else they touch they only insert. They use nothing later than the schema of their
// protocol (a fleet upgrades host by host, and binaries of protocol 4 run on this schema too), so
// they take the stored codes they write or compare as parameters (package codes), rather than
// naming them through migration 0018's functions. The statements kept for older protocols are in
// compat_protocol1.go, compat_protocol2.go and compat_protocol5.go.
//
// A task row as the token logic reads it (scanTaskRows): its id, token list, holders, queue,
// fence, overrides, declared limit and host, whether waiters were marked within the minute, the
// grant protocol, the heap page of the row version and its transaction id (xmin: it changes with
// every write of the row); then what it holds of keys (0022: keycodec.go).

// lockTasksSQL is the first statement of every token transaction: it takes the rows' locks in
// id order (no deadlock between transactions serving several tasks) before anything is read, and
// returns each row as it is under the lock. (A lock, not a write: the row is written once, by
// updateTasksSQL, if anything changed.) NO KEY UPDATE, the lock an UPDATE of non-key columns
// takes: it lets an insert that references the row (an execution's foreign key, as a waiter's
// take inserts) go on without waiting for the transaction.
const lockTasksSQL = `
SELECT d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text,
    d.key_holders, d.key_limit, d.key_overrides, d.declared_key_limit, d.declared_keys, d.key_vtime, d.key_waiting
FROM taskling.task_definition d
WHERE d.id = ANY($1)
ORDER BY d.id
FOR NO KEY UPDATE OF d`

// clockSQL reads the DB clock in µs once the locks are held (the lock statement computes its
// columns before it waits for a lock), to judge liveness by, and the timeline the server writes on
// with its epoch (0012_epochs.sql): whether it is known, since when (0: no hold) and its fence base.
const clockSQL = `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, t.tl, e.timeline IS NOT NULL,
    coalesce(CASE WHEN e.since = '-infinity' THEN 0 ELSE (extract(epoch FROM e.since) * 1000000)::bigint END, 0),
    coalesce(e.fence_base, 0)
FROM (SELECT ` + timelineExpr + ` AS tl) t LEFT JOIN taskling.epoch e ON e.timeline = t.tl`

// registerEpochSQL records a timeline seen for the first time: grants on it wait one threshold
// from now, and its fences start above anything an older timeline handed out.
const registerEpochSQL = `INSERT INTO taskling.epoch (timeline, since, fence_base)
VALUES ($1::integer, clock_timestamp(), $1::integer::bigint << 40) ON CONFLICT (timeline) DO NOTHING`

// reserveIDsSQL reserves the ids of the executions the transaction may insert.
const reserveIDsSQL = `SELECT nextval('taskling.task_execution_id_seq') FROM generate_series(1, $1)`

// reserveOnTimelineSQL is reserveIDsSQL when the server writes on timeline $2 (the fast path's
// CAS checks the same), else nothing.
const reserveOnTimelineSQL = `SELECT nextval('taskling.task_execution_id_seq') FROM generate_series(1, $1)
WHERE EXISTS (SELECT 1 FROM taskling.epoch e WHERE e.timeline = $2 AND e.timeline = ` + timelineExpr + `)`

// sessionsSQL reads the last heartbeat (µs) of every session the tasks' holders belong to.
const sessionsSQL = `
SELECT s.id, (extract(epoch FROM s.last_heartbeat) * 1000000)::bigint
FROM taskling.session s
WHERE s.id = ANY(ARRAY(SELECT m[1]::bigint FROM taskling.task_definition d, regexp_matches(d.holders || '|' || d.queue, 'P:([0-9]+)', 'g') m
                       WHERE d.id = ANY($1)))`

// claimsSQL reads the claims of the idempotent references requested.
const claimsSQL = `
SELECT c.task_id, c.reference_value, c.execution_id, c.succeeded
FROM taskling.reference_claim c
JOIN unnest($1::bigint[], $2::text[]) AS r(task, ref) ON c.task_id = r.task AND c.reference_value = r.ref`

// endedSQL reads the recorded ends of executions whose release is a retry.
const endedSQL = `SELECT execution_id, outcome FROM taskling.execution_end WHERE execution_id = ANY($1)`

// updateTasksSQL writes the tasks' token lists, holders (with the DB clock as the grant time of
// the holders granted now: grantMark, 'A:@', becomes it), fences, declarations, waiter marks and
// keys (a NULL declaration keeps the stored one).
const updateTasksSQL = `
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
                         ELSE d.waiters_until END,
    key_holders = u.key_holders,
    key_vtime = u.key_vtime,
    key_waiting = u.key_waiting,
    declared_key_limit = coalesce(u.declared_key_limit, d.declared_key_limit),
    declared_keys = coalesce(u.declared_keys, d.declared_keys)
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[],
            $9::text[], $10::bigint[], $11::integer[], $12::integer[], $13::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue, key_holders, key_vtime, key_waiting,
         declared_key_limit, declared_keys)
WHERE d.id = ANY($1) AND d.id = u.id
RETURNING d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text,
    d.key_holders, d.key_limit, d.key_overrides, d.declared_key_limit, d.declared_keys, d.key_vtime, d.key_waiting`

// noPendingHandoffSQL is the fast path's condition that no grant to a ticket of the task is
// pending.
const noPendingHandoffSQL = `    AND NOT EXISTS (SELECT 1 FROM taskling.handoff h WHERE h.task_id = d.id AND h.lapsed_at IS NULL)`

// casTasksSQL is updateTasksSQL for decisions taken on cached rows (the fast path): each row is
// written only if it is still the version the decision was taken on (xmin, $9) under the same
// grant protocol ($10), only if the server still writes on the timeline (with its epoch) the
// decision was taken for ($11), only if no other transaction holds its lock (the fast path never
// waits for a lock, since a grant's lease is measured from before its round trip; the usual path,
// after the lock, takes it), and only if no grant to a ticket is pending (the cached row cannot
// tell a release of such a grant, whose take a failover lost, from any other: the usual path reads
// them).
const casTasksSQL = `
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
                         ELSE d.waiters_until END,
    key_holders = u.key_holders,
    key_vtime = u.key_vtime,
    key_waiting = u.key_waiting,
    declared_key_limit = coalesce(u.declared_key_limit, d.declared_key_limit),
    declared_keys = coalesce(u.declared_keys, d.declared_keys)
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[], $9::text[],
            $12::text[], $13::bigint[], $14::integer[], $15::integer[], $16::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue, xmin, key_holders, key_vtime, key_waiting,
         declared_key_limit, declared_keys)
WHERE d.id = ANY($1) AND d.id = u.id AND d.xmin = u.xmin::xid AND (SELECT version FROM taskling.protocol WHERE singleton) = $10
    AND d.id IN (SELECT l.id FROM taskling.task_definition l WHERE l.id = ANY($1) FOR UPDATE SKIP LOCKED)
    AND EXISTS (SELECT 1 FROM taskling.epoch e WHERE e.timeline = $11 AND e.timeline = ` + timelineExpr + `)
` + noPendingHandoffSQL + `
RETURNING d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), (d.ctid::text::point)[0]::bigint, d.xmin::text,
    d.key_holders, d.key_limit, d.key_overrides, d.declared_key_limit, d.declared_keys, d.key_vtime, d.key_waiting`

// insertExecutionsSQL inserts the executions granted or denied (a denied one starts and ends at
// once). Rows go in fence order: clock_timestamp() (volatile, so evaluated after the sort) then
// gives grants of one task written together start times in fence order.
const insertExecutionsSQL = `
INSERT INTO taskling.task_execution (
    id, task_id, started_at, completed_at, last_keep_alive, host_name, session_id,
    death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, token_id, fence,
    scheduled_for, library_version, key, cost)
SELECT r.id, r.task, clock_timestamp(), CASE WHEN r.blocked THEN clock_timestamp() END, clock_timestamp(), r.host,
    nullif(r.session, 0), r.mode, r.kai, r.kadt, r.ot, r.ref, r.idem, r.header::jsonb, r.blocked, r.reason, r.token::uuid,
    r.fence, r.sched, $1, r.key, r.cost
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::smallint[], $7::interval[], $8::interval[],
            $9::interval[], $10::text[], $11::boolean[], $12::text[], $13::boolean[], $14::text[], $15::text[],
            $16::bigint[], $17::timestamptz[], $18::text[], $19::integer[])
    AS r(id, task, host, session, mode, kai, kadt, ot, ref, idem, header, blocked, reason, token, fence, sched, key, cost)
ORDER BY r.fence NULLS LAST, r.id
RETURNING id, started_at`

// fastInsertExecutionsSQL is insertExecutionsSQL for the tasks this transaction wrote
// (casTasksSQL: a task whose compare-and-set failed writes nothing).
const fastInsertExecutionsSQL = `
INSERT INTO taskling.task_execution (
    id, task_id, started_at, completed_at, last_keep_alive, host_name, session_id,
    death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, token_id, fence,
    scheduled_for, library_version, key, cost)
SELECT r.id, r.task, clock_timestamp(), CASE WHEN r.blocked THEN clock_timestamp() END, clock_timestamp(), r.host,
    nullif(r.session, 0), r.mode, r.kai, r.kadt, r.ot, r.ref, r.idem, r.header::jsonb, r.blocked, r.reason, r.token::uuid,
    r.fence, r.sched, $1, r.key, r.cost
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::smallint[], $7::interval[], $8::interval[],
            $9::interval[], $10::text[], $11::boolean[], $12::text[], $13::boolean[], $14::text[], $15::text[],
            $16::bigint[], $17::timestamptz[], $18::text[], $19::integer[])
    AS r(id, task, host, session, mode, kai, kadt, ot, ref, idem, header, blocked, reason, token, fence, sched, key, cost)
WHERE r.task IN (SELECT w.id FROM taskling.task_definition w
    WHERE w.id = ANY($3::bigint[]) AND w.xmin = pg_current_xact_id_if_assigned()::xid)
ORDER BY r.fence NULLS LAST, r.id
RETURNING id, started_at`

// linkSQL starts an attempt of each claimed submission under the execution granted for it ($1
// submissions, $2 the sessions that claimed them, $3 the executions, $4 their tasks; $5 the
// in-progress status, $6 the waiting one); a submission cancelled meanwhile, or whose claim lapsed
// and went to another worker, is left alone.
const linkSQL = `
WITH s AS (
    UPDATE taskling.submission s
    SET status = $5::smallint, attempts = s.attempts + 1, execution_id = r.exec, claimed_by = NULL, updated_at = clock_timestamp()
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS r(sub, session, exec, task)
    WHERE s.id = r.sub AND s.status = $6::smallint AND s.claimed_by = r.session
    RETURNING s.id, s.attempts, r.exec
)
INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id)
SELECT id, attempts, exec FROM s
RETURNING execution_id, attempt`

// fastLinkSQL is linkSQL for the tasks this transaction wrote (casTasksSQL).
const fastLinkSQL = `
WITH s AS (
    UPDATE taskling.submission s
    SET status = $5::smallint, attempts = s.attempts + 1, execution_id = r.exec, claimed_by = NULL, updated_at = clock_timestamp()
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS r(sub, session, exec, task)
    WHERE s.id = r.sub AND s.status = $6::smallint AND s.claimed_by = r.session AND r.task IN (SELECT w.id FROM taskling.task_definition w
    WHERE w.id = ANY($4::bigint[]) AND w.xmin = pg_current_xact_id_if_assigned()::xid)
    RETURNING s.id, s.attempts, r.exec
)
INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id)
SELECT id, attempts, exec FROM s
RETURNING execution_id, attempt`

// claimRefsSQL claims the idempotent references granted now (over a claim that did not succeed
// and whose execution no longer runs).
const claimRefsSQL = `
INSERT INTO taskling.reference_claim (task_id, reference_value, execution_id)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
ON CONFLICT (task_id, reference_value) DO UPDATE
SET execution_id = EXCLUDED.execution_id, succeeded = false, claimed_at = clock_timestamp()`

// reclaimSQL records the reclaim of dead holders ($5: the reclaimed outcome). Each is rechecked
// under its session's row lock: a heartbeat that renewed the session since the read (it waits for
// this lock, and then finds the reclaim) aborts the transaction with a serialization failure, so
// it is retried and sees the holder alive. This is what keeps READ COMMITTED safe.
const reclaimSQL = `
WITH r AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS r(exec, session, granted_us, threshold_us)),
s AS (SELECT s.id, s.last_heartbeat FROM taskling.session s WHERE s.id IN (SELECT session FROM r WHERE session <> 0) FOR SHARE OF s),
j AS (SELECT r.exec, greatest(timestamptz 'epoch' + r.granted_us * interval '1 microsecond', s.last_heartbeat) AS last,
             r.threshold_us * interval '1 microsecond' AS threshold
      FROM r LEFT JOIN s ON s.id = r.session)
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT exec, $5::smallint, last FROM j
WHERE clock_timestamp() - last > threshold
   OR taskling.serialization_conflict('execution ' || exec || ' renewed its lease while being reclaimed')
ON CONFLICT (execution_id) DO NOTHING`

// endSQL records the ends of the executions released. A second end of one changes nothing.
const endSQL = `
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT r.id, r.outcome, clock_timestamp() FROM unnest($1::bigint[], $2::smallint[]) AS r(id, outcome)
ON CONFLICT (execution_id) DO NOTHING`

// fastEndSQL is endSQL for the tasks this transaction wrote (casTasksSQL).
const fastEndSQL = `
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT r.id, r.outcome, clock_timestamp() FROM unnest($1::bigint[], $2::smallint[], $3::bigint[]) AS r(id, outcome, task)
WHERE r.task IN (SELECT w.id FROM taskling.task_definition w
    WHERE w.id = ANY($3::bigint[]) AND w.xmin = pg_current_xact_id_if_assigned()::xid)
ON CONFLICT (execution_id) DO NOTHING`

// succeededSQL marks the claims of idempotent executions that completed successfully.
const succeededSQL = `
UPDATE taskling.reference_claim c SET succeeded = true
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS r(task, ref, exec)
WHERE c.task_id = r.task AND c.reference_value = r.ref AND c.execution_id = r.exec`

// notifySQL announces freed slots of the tasks to waiters (NotifyChannel; payloads from
// notifyPayload).
const notifySQL = `SELECT pg_notify('taskling_slots', p) FROM unnest($1::text[]) AS p`

// fastNotifySQL announces the slots freed in the tasks this transaction wrote (casTasksSQL) to
// their waiters, if any.
const fastNotifySQL = `SELECT pg_notify('taskling_slots', u.p)
FROM unnest($1::bigint[], $2::text[]) AS u(id, p) JOIN taskling.task_definition d ON d.id = u.id
WHERE d.id = ANY($1) AND d.waiters_until > clock_timestamp() AND d.xmin = pg_current_xact_id_if_assigned()::xid`

// The statements of keyed tasks (grant protocol 6, 0022_keys.sql). Each serves one task ($1 its
// stripe, the task id modulo 64; $2 its id): task_key and key_ticket are partitioned by stripe, and
// a scalar stripe lets the planner keep only that partition (a generic plan prunes the others when
// the executor starts), so a transaction reads and locks nothing of another stripe's partitions.

// keyRowsSQL reads, under the task row's lock, the round-robin state of the keys named by the
// requests ($3) and of the first $4 keys with waiters in round-robin order (task_key_round_idx);
// candidate says which. A key read both ways comes twice.
const keyRowsSQL = `
SELECT k.key, k.pass, k.granted_us, k.waiting, k.top_priority, false AS candidate
FROM taskling.task_key k
WHERE k.stripe = $1 AND k.task_id = $2 AND k.key = ANY($3::text[])
UNION ALL
(SELECT k.key, k.pass, k.granted_us, k.waiting, k.top_priority, true
 FROM taskling.task_key k
 WHERE k.stripe = $1 AND k.task_id = $2 AND k.waiting > 0
 ORDER BY k.top_priority DESC, k.pass, k.granted_us, k.key
 LIMIT $4)`

// keyTicketsSQL reads the task's tickets the decision needs, with their sessions' last heartbeats
// (µs; 0 if gone): the requests' own ($3), the first $5 of each of the first $4 keys in round-robin
// order (key_ticket_key_idx), and the $6 oldest (key_ticket_age_idx).
const keyTicketsSQL = `
WITH c AS (
    SELECT k.key FROM taskling.task_key k
    WHERE k.stripe = $1 AND k.task_id = $2 AND k.waiting > 0
    ORDER BY k.top_priority DESC, k.pass, k.granted_us, k.key
    LIMIT $4
), t AS (
    SELECT x.id, x.key, x.cost, x.priority, x.session_id, x.queued_us, x.offered_us, x.threshold_us, x.window_us, x.direct
    FROM taskling.key_ticket x WHERE x.stripe = $1 AND x.task_id = $2 AND x.id = ANY($3::bigint[])
    UNION
    SELECT y.id, y.key, y.cost, y.priority, y.session_id, y.queued_us, y.offered_us, y.threshold_us, y.window_us, y.direct
    FROM c CROSS JOIN LATERAL (
        SELECT x.* FROM taskling.key_ticket x
        WHERE x.stripe = $1 AND x.task_id = $2 AND x.key = c.key
        ORDER BY x.priority DESC, x.queued_us, x.id
        LIMIT $5) y
    UNION
    (SELECT x.id, x.key, x.cost, x.priority, x.session_id, x.queued_us, x.offered_us, x.threshold_us, x.window_us, x.direct
     FROM taskling.key_ticket x WHERE x.stripe = $1 AND x.task_id = $2
     ORDER BY x.queued_us, x.id
     LIMIT $6)
)
SELECT t.id, t.key, t.cost, t.priority, t.session_id, t.queued_us, t.offered_us, t.threshold_us, t.window_us, t.direct,
    coalesce((extract(epoch FROM s.last_heartbeat) * 1000000)::bigint, 0)
FROM t LEFT JOIN taskling.session s ON s.id = t.session_id`

// deleteKeyTicketsSQL removes tickets $3 (granted, gone, or refused).
const deleteKeyTicketsSQL = `DELETE FROM taskling.key_ticket WHERE stripe = $1 AND task_id = $2 AND id = ANY($3::bigint[])`

// insertKeyTicketsSQL queues tickets.
const insertKeyTicketsSQL = `
INSERT INTO taskling.key_ticket (stripe, task_id, id, key, cost, priority, session_id, queued_us, threshold_us, window_us, offered_us,
    direct)
SELECT $1, $2, r.id, r.key, r.cost, r.priority, r.session, r.queued, r.threshold, r.win, r.offered, r.direct
FROM unnest($3::bigint[], $4::text[], $5::integer[], $6::integer[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[],
            $11::bigint[], $12::boolean[])
    AS r(id, key, cost, priority, session, queued, threshold, win, offered, direct)`

// updateKeyTicketsSQL records offers.
const updateKeyTicketsSQL = `
UPDATE taskling.key_ticket x SET queued_us = r.queued, offered_us = r.offered
FROM unnest($3::bigint[], $4::bigint[], $5::bigint[]) AS r(id, queued, offered)
WHERE x.stripe = $1 AND x.task_id = $2 AND x.id = r.id`

// upsertKeysSQL writes keys' round-robin state, creating their rows on demand: a grant sets the
// pass and time; a key that starts waiting (no grant: time 0) joins at the later of its pass and
// the virtual time ($4).
const upsertKeysSQL = `
INSERT INTO taskling.task_key AS k (stripe, task_id, key, pass, granted_us)
SELECT $1, $2, r.key, r.pass, r.granted FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS r(key, pass, granted)
ON CONFLICT (stripe, task_id, key) DO UPDATE
SET pass = CASE WHEN EXCLUDED.granted_us = 0 THEN greatest(k.pass, EXCLUDED.pass) ELSE EXCLUDED.pass END,
    granted_us = CASE WHEN EXCLUDED.granted_us = 0 THEN k.granted_us ELSE EXCLUDED.granted_us END`

// refreshKeysSQL counts keys' waiters ($4: tickets added minus removed) and their top priority
// (key_ticket_key_idx: one row), after the tickets' writes.
const refreshKeysSQL = `
UPDATE taskling.task_key k
SET waiting = k.waiting + r.delta,
    top_priority = coalesce((SELECT x.priority FROM taskling.key_ticket x
                             WHERE x.stripe = $1 AND x.task_id = $2 AND x.key = k.key
                             ORDER BY x.priority DESC LIMIT 1), 0)
FROM unnest($3::text[], $4::integer[]) AS r(key, delta)
WHERE k.stripe = $1 AND k.task_id = $2 AND k.key = r.key`

// dropKeysSQL deletes the rows of keys $3 once they have no waiter (the decision knows they have no
// holder).
const dropKeysSQL = `DELETE FROM taskling.task_key WHERE stripe = $1 AND task_id = $2 AND key = ANY($3::text[]) AND waiting = 0`

// fastDropKeysSQL is dropKeysSQL for a task this transaction wrote (casTasksSQL).
const fastDropKeysSQL = `
DELETE FROM taskling.task_key k
WHERE k.stripe = $1 AND k.task_id = $2 AND k.key = ANY($3::text[]) AND k.waiting = 0
    AND EXISTS (SELECT 1 FROM taskling.task_definition w WHERE w.id = $2 AND w.xmin = pg_current_xact_id_if_assigned()::xid)`

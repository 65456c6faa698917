package execution

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The SQL of the token transactions. Under SERIALIZABLE, they read only rows that no token
// transaction of another task writes — their own task rows, their holders' sessions (written by
// heartbeats, at READ COMMITTED), their reference claims — so that unrelated tasks never
// conflict; everything else they touch they only insert.

// usSQL is the database clock in µs since the Unix epoch.
const usSQL = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

// taskRowSQL are the columns of the task row d that the token logic reads (scanTaskRow), with the
// row version's heap page and transaction id (xmin: it changes with every write of the row).
const taskRowSQL = `d.id, d.tokens, d.holders, d.queue, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.declared_limit, d.declared_by, coalesce(d.waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol WHERE singleton), ` + blockSQL + `, d.xmin::text`

// lockTasksSQL is the first statement of every token transaction: it takes the rows' locks in
// id order (no deadlock between transactions serving several tasks) before anything is read, and
// returns each row as it is under the lock. (A lock, not a write: the row is written once, by
// updateTasksSQL, if anything changed.) NO KEY UPDATE, the lock an UPDATE of non-key columns
// takes: it lets an insert that references the row (an execution's foreign key, as a waiter's
// take inserts) go on without waiting for the transaction.
const lockTasksSQL = `
SELECT ` + taskRowSQL + `
FROM taskling.task_definition d
WHERE d.id = ANY($1)
ORDER BY d.id
FOR NO KEY UPDATE OF d`

// blockSQL is the heap page of the task row d's version (see combiner.pages).
const blockSQL = `(d.ctid::text::point)[0]::bigint`

// clockSQL reads the DB clock once the locks are held (the lock statement computes its columns
// before it waits for a lock), to judge liveness by, and the timeline the server writes on with
// its epoch (0012_epochs.sql): whether it is known, since when (0: no hold) and its fence base.
const clockSQL = `SELECT ` + usSQL + `, t.tl, e.timeline IS NOT NULL,
    coalesce(CASE WHEN e.since = '-infinity' THEN 0 ELSE (extract(epoch FROM e.since) * 1000000)::bigint END, 0),
    coalesce(e.fence_base, 0)
FROM (SELECT taskling.timeline() AS tl) t LEFT JOIN taskling.epoch e ON e.timeline = t.tl`

// legacyClockSQL is clockSQL on a schema older than epochs (protocol 2, before the migration):
// a known epoch with no hold and no fence base.
const legacyClockSQL = `SELECT ` + usSQL + `, 0, true, 0::bigint, 0::bigint`

// registerEpochSQL records a timeline seen for the first time: grants on it wait one threshold
// from now, and its fences start above anything an older timeline handed out.
const registerEpochSQL = `INSERT INTO taskling.epoch (timeline, since, fence_base)
VALUES ($1::integer, clock_timestamp(), $1::integer::bigint << 40) ON CONFLICT (timeline) DO NOTHING`

// reserveIDsSQL reserves the ids of the executions the transaction may insert.
const reserveIDsSQL = `SELECT nextval('taskling.task_execution_id_seq') FROM generate_series(1, $1)`

// sessionsSQL reads the last heartbeat of every session the tasks' holders belong to.
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

// aliveSQL judges the task_execution row e (with its session s and end x, when joined) on the DB
// clock at this moment: a holder is dead strictly after its threshold. Rows of protocol 1 (no
// session) are judged by their own heartbeat column.
var aliveSQL = fmt.Sprintf(`(CASE WHEN e.death_mode <> %d THEN clock_timestamp() - e.started_at <= e.override_threshold
    WHEN e.session_id IS NOT NULL THEN clock_timestamp() - greatest(e.started_at, s.last_heartbeat) <= e.keep_alive_death_threshold
    ELSE clock_timestamp() - e.last_keep_alive <= e.keep_alive_death_threshold END)`, modeKeepAlive)

// legacyAliveSQL and legacyExpiresInSQL judge a row of protocol 1 by its own heartbeat column.
var legacyAliveSQL = fmt.Sprintf(`(CASE e.death_mode
    WHEN %d THEN clock_timestamp() - e.last_keep_alive <= e.keep_alive_death_threshold
    ELSE clock_timestamp() - e.started_at <= e.override_threshold END)`, modeKeepAlive)

var legacyExpiresInSQL = fmt.Sprintf(`(extract(epoch FROM (CASE e.death_mode
    WHEN %d THEN e.last_keep_alive + e.keep_alive_death_threshold
    ELSE e.started_at + e.override_threshold END) - clock_timestamp()) * 1000000)::bigint`, modeKeepAlive)

// legacySQL judges grantees that have no liveness terms (grants of protocol 1, or holders whose
// row was deleted: those are missing here, so dead).
var legacySQL = `
SELECT e.id, ` + legacyAliveSQL + `, ` + legacyExpiresInSQL + `
FROM taskling.task_execution e
WHERE e.id = ANY($1) AND e.completed_at IS NULL AND e.reclaimed_at IS NULL AND e.token_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)`

// endedSQL reads the recorded ends of executions whose release is a retry.
const endedSQL = `SELECT execution_id, outcome FROM taskling.execution_end WHERE execution_id = ANY($1)`

// updateTasksSQL writes the tasks' token lists, holders (with the DB clock as the grant time of
// the holders granted now), fences, declarations and waiter marks.
const updateTasksSQL = `
UPDATE taskling.task_definition d SET ` + updateTasksSet + `
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue)
WHERE d.id = ANY($1) AND d.id = u.id
RETURNING ` + taskRowSQL

// casTasksSQL is updateTasksSQL for decisions taken on cached rows: each row is written only if
// it is still the version the decision was taken on (xmin, $9) under the same grant protocol ($10),
// and only if the server still writes on the timeline (with its epoch) the decision was taken
// for, $11, and only if no other transaction holds its lock: the fast path never waits for a lock, since a
// grant's lease is measured from before its round trip (the usual path, after the lock, takes it).
const casTasksHead = `
UPDATE taskling.task_definition d SET ` + updateTasksSet + `
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::text[], $7::boolean[], $8::text[], $9::text[])
    AS u(id, tokens, holders, fence, declared_limit, declared_by, mark, queue, xmin)
WHERE d.id = ANY($1) AND d.id = u.id AND d.xmin = u.xmin::xid AND (SELECT version FROM taskling.protocol WHERE singleton) = $10
    AND d.id IN (SELECT l.id FROM taskling.task_definition l WHERE l.id = ANY($1) FOR UPDATE SKIP LOCKED)`

var (
	casTasksSQL = casTasksHead + `
    AND EXISTS (SELECT 1 FROM taskling.epoch e WHERE e.timeline = $11 AND e.timeline = taskling.timeline())
RETURNING ` + taskRowSQL
	// legacyCASTasksSQL is casTasksSQL on a schema older than epochs ($11 unused).
	legacyCASTasksSQL = casTasksHead + ` AND $11::integer IS NOT NULL
RETURNING ` + taskRowSQL
)

// writtenSQL holds for the task whose id is the column %[1]s, one of the array %[2]s, once this
// transaction wrote its row.
const writtenSQL = `%[1]s IN (SELECT w.id FROM taskling.task_definition w
    WHERE w.id = ANY(%[2]s) AND w.xmin = pg_current_xact_id_if_assigned()::xid)`

const updateTasksSet = `
    tokens = u.tokens,
    queue = u.queue,
    holders = replace(u.holders, '` + grantMark + `', 'A:' || ` + usSQL + `),
    fence = u.fence,
    declared_at = CASE WHEN u.declared_limit IS NOT NULL
                        AND (d.declared_limit IS DISTINCT FROM u.declared_limit OR d.declared_by IS DISTINCT FROM u.declared_by)
                       THEN clock_timestamp() ELSE d.declared_at END,
    declared_limit = coalesce(u.declared_limit, d.declared_limit),
    declared_by = coalesce(u.declared_by, d.declared_by),
    waiters_until = CASE WHEN u.mark THEN greatest(d.waiters_until, clock_timestamp() + interval '60 seconds')
                         ELSE d.waiters_until END`

// insertExecutionsSQL inserts the executions granted or denied (a denied one starts and ends at
// once). Rows go in fence order: clock_timestamp() (volatile, so evaluated after the sort) then
// gives grants of one task written together start times in fence order.
const insertExecutionsSQL = insertExecutionsHead + `
ORDER BY r.fence NULLS LAST, r.id
RETURNING id, started_at`

// fastInsertExecutionsSQL inserts those of tasks this transaction wrote (casTasksSQL).
var fastInsertExecutionsSQL = insertExecutionsHead + `
WHERE ` + fmt.Sprintf(writtenSQL, "r.task", "$3::bigint[]") + `
ORDER BY r.fence NULLS LAST, r.id
RETURNING id, started_at`

const insertExecutionsHead = `
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
    AS r(id, task, host, session, mode, kai, kadt, ot, ref, idem, header, blocked, reason, token, fence, sched)`

// linkSubmissionsSQL starts an attempt of each claimed submission under the execution granted
// for it ($1 submissions, $2 the sessions that claimed them, $3 the executions); a submission
// cancelled meanwhile, or whose claim lapsed and went to another worker, is left alone.
const linkSubmissionsSQL = `
WITH s AS (
    UPDATE taskling.submission s
    SET status = 2, attempts = s.attempts + 1, execution_id = r.exec, claimed_by = NULL, updated_at = clock_timestamp()
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS r(sub, session, exec, task)
    WHERE s.id = r.sub AND s.status = 1 AND s.claimed_by = r.session %s
    RETURNING s.id, s.attempts, r.exec
)
INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id)
SELECT id, attempts, exec FROM s
RETURNING execution_id, attempt`

var (
	linkSQL     = fmt.Sprintf(linkSubmissionsSQL, "")
	fastLinkSQL = fmt.Sprintf(linkSubmissionsSQL, "AND "+fmt.Sprintf(writtenSQL, "r.task", "$4::bigint[]"))
)

// claimRefsSQL claims the idempotent references granted now (over a claim that did not
// succeed and whose execution no longer runs).
const claimRefsSQL = `
INSERT INTO taskling.reference_claim (task_id, reference_value, execution_id)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
ON CONFLICT (task_id, reference_value) DO UPDATE
SET execution_id = EXCLUDED.execution_id, succeeded = false, claimed_at = clock_timestamp()`

// reclaimSQL records the reclaim of dead holders. Each is rechecked under its session's row
// lock: a heartbeat that renewed the session since the read (it waits for this lock, and then
// finds the reclaim) aborts the transaction with a serialization failure, so it is retried and
// sees the holder alive. This is what keeps READ COMMITTED safe.
var reclaimSQL = `
WITH r AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS r(exec, session, granted_us, threshold_us)),
s AS (SELECT s.id, s.last_heartbeat FROM taskling.session s WHERE s.id IN (SELECT session FROM r WHERE session <> 0) FOR SHARE OF s),
j AS (SELECT r.exec, greatest(timestamptz 'epoch' + r.granted_us * interval '1 microsecond', s.last_heartbeat) AS last,
             r.threshold_us * interval '1 microsecond' AS threshold
      FROM r LEFT JOIN s ON s.id = r.session)
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT exec, ` + endReclaimedText + `, last FROM j
WHERE clock_timestamp() - last > threshold
   OR taskling.serialization_conflict('execution ' || exec || ' renewed its lease while being reclaimed')
ON CONFLICT (execution_id) DO NOTHING`

// legacyReclaimSQL reclaims holders of protocol 1, rechecked under their own row lock.
var legacyReclaimSQL = `
WITH r AS (
    UPDATE taskling.task_execution e SET reclaimed_at = clock_timestamp()
    WHERE e.id = ANY($1) AND e.completed_at IS NULL AND e.reclaimed_at IS NULL
    RETURNING e.id, e.last_keep_alive, ` + legacyAliveSQL + ` AS alive
)
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT id, ` + endReclaimedText + `, last_keep_alive FROM r
WHERE NOT alive OR taskling.serialization_conflict('execution ' || id || ' renewed its lease while being reclaimed')
ON CONFLICT (execution_id) DO NOTHING`

var endReclaimedText = fmt.Sprint(endReclaimed)

// endSQL records the ends of the executions released. A second end of one changes nothing.
const endSQL = `
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT r.id, r.outcome, clock_timestamp() FROM unnest($1::bigint[], $2::smallint[]) AS r(id, outcome)
ON CONFLICT (execution_id) DO NOTHING`

// fastEndSQL records those of tasks this transaction wrote (casTasksSQL).
var fastEndSQL = `
INSERT INTO taskling.execution_end (execution_id, outcome, last_heartbeat)
SELECT r.id, r.outcome, clock_timestamp() FROM unnest($1::bigint[], $2::smallint[], $3::bigint[]) AS r(id, outcome, task)
WHERE ` + fmt.Sprintf(writtenSQL, "r.task", "$3::bigint[]") + `
ON CONFLICT (execution_id) DO NOTHING`

// succeededSQL marks the claims of idempotent executions that completed successfully.
const succeededSQL = `
UPDATE taskling.reference_claim c SET succeeded = true
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS r(task, ref, exec)
WHERE c.task_id = r.task AND c.reference_value = r.ref AND c.execution_id = r.exec`

// notifySQL announces freed slots of the tasks to waiters (NotifyChannel; payloads from
// notifyPayload).
const notifySQL = `SELECT pg_notify('` + NotifyChannel + `', p) FROM unnest($1::text[]) AS p`

// fastNotifySQL announces the slots freed in the tasks this transaction wrote (casTasksSQL) to
// their waiters, if any.
const fastNotifySQL = `SELECT pg_notify('` + NotifyChannel + `', u.p)
FROM unnest($1::bigint[], $2::text[]) AS u(id, p) JOIN taskling.task_definition d ON d.id = u.id
WHERE d.id = ANY($1) AND d.waiters_until > clock_timestamp() AND d.xmin = pg_current_xact_id_if_assigned()::xid`

// notifyPayload is a freed slot's notification: the task id, then the tickets the slot is
// offered to ("12:40,41"), so that only their waiters wake instead of every waiter of the task.
func notifyPayload(taskID int64, offered []int64) string {
	p := strconv.FormatInt(taskID, 10)
	for i, t := range offered {
		if i == 0 {
			p += ":"
		} else {
			p += ","
		}
		p += strconv.FormatInt(t, 10)
	}
	return p
}

// NotifyChannel is the LISTEN/NOTIFY channel on which a freed slot is announced (and, by the
// feature stores and triggers, a submission to run or cancel).
const NotifyChannel = "taskling_slots"

// DenyReason says why an acquisition was not granted.
type DenyReason int

const (
	NotDenied DenyReason = iota
	DeniedLimit
	DeniedDisabled
	DeniedDuplicate
)

// AcquireRequest asks for a slot of a task.
type AcquireRequest struct {
	TaskID   int64
	TaskName string // "app/task", for error messages
	Host     string
	// SessionID is the requester's session (RegisterSession): a holder in KeepAlive mode lives
	// by its heartbeat.
	SessionID int64
	// Declared are the requester's settings (defaults, config and code), before operator
	// overrides. They must be valid.
	Declared       Settings
	ReferenceValue *string
	Idempotent     bool
	Header         []byte // JSON, or nil
	ScheduledFor   *time.Time
	// Schedule, with ScheduledFor, makes the acquisition claim a cron instant (see ScheduleClaim).
	// Such an acquisition runs in a transaction of its own: a lost claim aborts it.
	Schedule *ScheduleClaim
	// RecordDenial writes a denied attempt as a Blocked execution. When false (an attempt in a
	// wait loop), a denied attempt writes no execution; it marks the task as waited for (for the
	// next 60 s), so that releases notify the waiters. Wait loops must retry within 60 s.
	RecordDenial bool
	// Wait queues the requester for a slot when it is denied (a ticket in the task's row,
	// oldest first across every host, higher Priority first); later attempts pass the Ticket
	// they got. A ticket lives by the session's heartbeat (Declared.KeepAliveDeathThreshold),
	// and a slot offered to it that is not taken within OfferWindow passes to the next ticket.
	Wait        bool
	Ticket      int64
	Priority    int
	OfferWindow time.Duration
	// LeaveQueue removes Ticket from the queue (a waiter that gave up); nothing else is done.
	LeaveQueue bool
	// Submission is a waiting submission claimed by SessionID (ClaimSubmissions): a grant
	// starts its next attempt under the execution, in the same transaction (AcquireResult.Attempt).
	Submission int64
	// Direct asks for a direct ticket (protocol 4, handoff.go): a slot freed while it is first in
	// line is granted to it at once, and its waiter takes it with TakeHandoff. Only for a plain
	// start: no idempotent reference, cron instant, submission or critical section.
	Direct bool
	// Reap takes the slots of every holder judged dead, and grants nothing: the reclaims a grant
	// would make, without the grant (RecoverSubmissions).
	Reap bool
	// NewTokenID makes token ids (tests); nil means uuid.New.
	NewTokenID func() uuid.UUID
}

// AcquireResult is the outcome of an acquisition.
type AcquireResult struct {
	Denied      DenyReason
	ExecutionID int64 // 0 when a denial was not recorded
	TokenID     uuid.UUID
	Fence       int64
	StartedAt   time.Time
	// Effective are the settings in force: the declared ones with the operator's overrides.
	Effective  Settings
	Overridden bool
	// NextExpiry is, when denied for the limit, how long until the earliest live holder could be
	// judged dead (on the DB clock); 0 if unknown.
	NextExpiry time.Duration
	// Ticket is the requester's ticket in the task's queue when denied with Wait, and Position
	// its place in line (1: next).
	Ticket   int64
	Position int
	// Direct: the ticket is direct (AcquireRequest.Direct was honoured). HandedOff: a slot is
	// granted to it; take it with TakeHandoff.
	Direct, HandedOff bool
	// Reclaimed lists the dead holders whose slots this acquisition took or removed (set once
	// the transaction committed).
	Reclaimed []int64
	// Attempt is the attempt of AcquireRequest.Submission the grant started; 0 when it did not
	// (the submission was cancelled, or its claim lapsed and another worker took it).
	Attempt int
	// ConflictingDeclaration is the different limit another host had declared, if any.
	ConflictingDeclaration *Declaration
	// SentAt is the local time just before the round trip that wrote the grant was sent: the
	// holder's lease is measured from it, on the local monotonic clock. (On the database, its
	// grant time is set by that round trip, so it is later.)
	SentAt time.Time
}

// Declaration is a limit declared by a requester, stored in the task row.
type Declaration struct {
	Limit int
	Host  string
}

// Acquire runs the acquire transaction, together with the other token operations this process
// has queued. It returns an error only when the transaction failed; a denial is a result.
func (s *Store) Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error) {
	o := &op{request: request{acquire: &req}, ctx: ctx}
	s.submit(o)
	if err := o.err(); err != nil {
		return AcquireResult{}, fmt.Errorf("execution: acquire %s: %w", req.TaskName, err)
	}
	return o.outcome.acquire, nil
}

func denyMessage(r DenyReason, limit int) string {
	switch r {
	case DeniedDuplicate:
		return "an execution with this reference value already succeeded or is running"
	case DeniedLimit:
		return fmt.Sprintf("concurrency limit %d reached", limit)
	}
	return "denied"
}

const insertBlockedSQL = `
INSERT INTO taskling.task_execution (
    task_id, started_at, completed_at, last_keep_alive, host_name, session_id, death_mode,
    keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, scheduled_for, library_version)
VALUES ($1, clock_timestamp(), clock_timestamp(), clock_timestamp(), $2, nullif($3, 0), $4, $5, $6, $7,
    $8, $9, $10, true, $11, $12, $13)
RETURNING id`

// RecordBlocked records a denied attempt without running the token logic: a requester that
// waited for a slot until its context ended records its attempt this way, once.
func (s *Store) RecordBlocked(ctx context.Context, req AcquireRequest, reason string) (int64, error) {
	d := req.Declared
	var header any
	if req.Header != nil {
		header = string(req.Header)
	}
	var id int64
	err := s.pool.QueryRow(ctx, insertBlockedSQL, req.TaskID, req.Host, req.SessionID, d.DeathMode,
		d.KeepAliveInterval, d.KeepAliveDeathThreshold, d.OverrideThreshold,
		req.ReferenceValue, req.Idempotent, header, reason, req.ScheduledFor, s.opts.LibraryVersion).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("execution: record blocked attempt of %s: %w", req.TaskName, err)
	}
	return id, nil
}

// executionRows are the rows the second round trip inserts, as column arrays.
type executionRows struct {
	ids, tasks, sessions []int64
	hosts                []string
	modes                []int16
	kai, kadt, ot        []time.Duration
	refs                 []*string
	idempotent           []bool
	headers              []*string
	blocked              []bool
	reasons              []*string
	tokenIDs             []*string
	fences               []*int64
	scheduledFor         []*time.Time
}

func (w *executionRows) args(version string) []any {
	return []any{version, w.ids, w.tasks, w.hosts, w.sessions, w.modes, w.kai, w.kadt, w.ot,
		w.refs, w.idempotent, w.headers, w.blocked, w.reasons, w.tokenIDs, w.fences, w.scheduledFor}
}

func (w *executionRows) add(req *AcquireRequest, res *AcquireResult) {
	e := res.Effective
	w.ids = append(w.ids, res.ExecutionID)
	w.tasks = append(w.tasks, req.TaskID)
	w.hosts = append(w.hosts, req.Host)
	w.sessions = append(w.sessions, req.SessionID)
	w.modes = append(w.modes, e.DeathMode)
	w.kai = append(w.kai, e.KeepAliveInterval)
	w.kadt = append(w.kadt, e.KeepAliveDeathThreshold)
	w.ot = append(w.ot, e.OverrideThreshold)
	w.refs = append(w.refs, req.ReferenceValue)
	w.idempotent = append(w.idempotent, req.Idempotent)
	var header *string
	if req.Header != nil {
		h := string(req.Header)
		header = &h
	}
	w.headers = append(w.headers, header)
	w.scheduledFor = append(w.scheduledFor, req.ScheduledFor)
	if res.Denied == NotDenied {
		token, fence := res.TokenID.String(), res.Fence
		w.blocked = append(w.blocked, false)
		w.reasons = append(w.reasons, nil)
		w.tokenIDs = append(w.tokenIDs, &token)
		w.fences = append(w.fences, &fence)
		return
	}
	reason := denyMessage(res.Denied, e.ConcurrencyLimit)
	w.blocked = append(w.blocked, true)
	w.reasons = append(w.reasons, &reason)
	w.tokenIDs = append(w.tokenIDs, nil)
	w.fences = append(w.fences, nil)
}

// scanInt64Pairs reads rows of two bigints.
func scanInt64Pairs(rows pgx.Rows, fn func(a, b int64)) error {
	for rows.Next() {
		var a, b int64
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		fn(a, b)
	}
	return rows.Err()
}

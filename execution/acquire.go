package execution

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// aliveSQL judges the task_execution row aliased e on the DB clock at this moment. It is the one
// predicate of liveness: a holder is dead strictly after its threshold.
var aliveSQL = fmt.Sprintf(`(CASE e.death_mode
    WHEN %d THEN clock_timestamp() - e.last_keep_alive <= e.keep_alive_death_threshold
    ELSE clock_timestamp() - e.started_at <= e.override_threshold END)`, modeKeepAlive)

// expiresInSQL is how long from now, on the DB clock, until the holder e may be judged dead, in
// microseconds (negative once dead).
var expiresInSQL = fmt.Sprintf(`(extract(epoch FROM (CASE e.death_mode
    WHEN %d THEN e.last_keep_alive + e.keep_alive_death_threshold
    ELSE e.started_at + e.override_threshold END) - clock_timestamp()) * 1000000)::bigint`, modeKeepAlive)

// mayHoldSQL selects the executions e that may still hold a slot: granted, neither completed
// nor reclaimed. task_execution_holders_idx has the same predicate.
const mayHoldSQL = `e.completed_at IS NULL AND e.token_id IS NOT NULL AND e.reclaimed_at IS NULL`

// lockTaskSQL is the first write of every token transaction: it takes the task row's lock before
// anything is read, reserves an execution id and returns the row as it is under the lock.
const lockTaskSQL = `
UPDATE taskling.task_definition
SET hold_lock_execution_id = nextval('taskling.task_execution_id_seq')
WHERE id = $1
RETURNING hold_lock_execution_id, tokens, fence,
    concurrency_limit, enabled, death_mode, keep_alive_interval, keep_alive_death_threshold,
    override_threshold, declared_limit, declared_by, coalesce(waiters_until > clock_timestamp(), false),
    (SELECT version FROM taskling.protocol)`

// moreIDsSQL reserves the ids of the other executions a batch may insert.
const moreIDsSQL = `SELECT nextval('taskling.task_execution_id_seq') FROM generate_series(1, $1)`

// holdersSQL lists the executions that may hold a slot of the task, with their liveness judged
// while the row lock is held. Served by task_execution_holders_idx.
var holdersSQL = `
SELECT e.id, ` + aliveSQL + `, ` + expiresInSQL + `
FROM taskling.task_execution e
WHERE e.task_id = $1 AND ` + mayHoldSQL

// duplicatesSQL finds executions of the task with one of the reference values that succeeded or
// are still running and alive. Served by task_execution_reference_idx.
var duplicatesSQL = `
SELECT e.id, e.reference_value FROM taskling.task_execution e
WHERE e.task_id = $1 AND e.reference_value = ANY($2) AND e.token_id IS NOT NULL
  AND NOT e.blocked AND NOT e.failed AND e.reclaimed_at IS NULL
  AND (e.completed_at IS NOT NULL OR ` + aliveSQL + `)`

const updateTokensSQL = `
UPDATE taskling.task_definition
SET tokens = $2, fence = $3,
    declared_at = CASE WHEN declared_limit IS DISTINCT FROM $4 OR declared_by IS DISTINCT FROM $5
                       THEN clock_timestamp() ELSE declared_at END,
    declared_limit = coalesce($4, declared_limit), declared_by = coalesce($5, declared_by),
    waiters_until = CASE WHEN $6 THEN greatest(waiters_until, clock_timestamp() + interval '60 seconds')
                         ELSE waiters_until END
WHERE id = $1`

const insertExecutionsSQL = `
INSERT INTO taskling.task_execution (
    id, task_id, started_at, completed_at, last_keep_alive, host_name,
    death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, token_id, fence,
    scheduled_for, library_version)
SELECT r.id, $1, clock_timestamp(), CASE WHEN r.blocked THEN clock_timestamp() END, clock_timestamp(), r.host,
    r.mode, r.kai, r.kadt, r.ot, r.ref, r.idem, r.header::jsonb, r.blocked, r.reason, r.token::uuid, r.fence,
    r.sched, $2
FROM unnest($3::bigint[], $4::text[], $5::smallint[], $6::interval[], $7::interval[], $8::interval[],
            $9::text[], $10::boolean[], $11::text[], $12::boolean[], $13::text[], $14::text[], $15::bigint[],
            $16::timestamptz[])
    AS r(id, host, mode, kai, kadt, ot, ref, idem, header, blocked, reason, token, fence, sched)
RETURNING id, started_at`

const insertEventsSQL = `
INSERT INTO taskling.task_execution_event (execution_id, event_type, message)
SELECT e.x, e.t, e.m FROM unnest($1::bigint[], $2::smallint[], $3::text[]) WITH ORDINALITY AS e(x, t, m, n)
ORDER BY e.n`

// reclaimSQL marks the dead holders whose slots this transaction takes. Each row is rechecked
// under its own row lock: a holder that renewed its lease since the read aborts the transaction
// (with a serialization failure, so it is retried and sees the holder alive). This is what keeps
// READ COMMITTED safe; under SERIALIZABLE PostgreSQL would catch it too.
var reclaimSQL = `
WITH r AS (
    UPDATE taskling.task_execution e SET reclaimed_at = clock_timestamp()
    WHERE e.id = ANY($1) AND e.completed_at IS NULL AND e.reclaimed_at IS NULL
    RETURNING e.id, ` + aliveSQL + ` AS alive
)
SELECT count(*) FILTER (WHERE NOT alive OR taskling.serialization_conflict('execution ' || id || ' renewed its lease while being reclaimed'))
FROM r`

// Event types stored in task_execution_event.event_type, and their names.
const (
	eventStart      int16 = 1
	eventCheckpoint int16 = 2
	eventError      int16 = 3
	eventEnd        int16 = 4
	eventBlocked    int16 = 5
)

var eventNames = map[int16]string{eventStart: "start", eventCheckpoint: "checkpoint", eventError: "error", eventEnd: "end", eventBlocked: "blocked"}

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
	// Reclaimed lists the dead holders whose slots this acquisition took or removed (set once
	// the transaction committed).
	Reclaimed []int64
	// ConflictingDeclaration is the different limit another host had declared, if any.
	ConflictingDeclaration *Declaration
	// SentAt is the local time just before the successful attempt's first round trip was sent:
	// the holder's lease is measured from it, on the local monotonic clock.
	SentAt time.Time
}

// Declaration is a limit declared by a requester, stored in the task row.
type Declaration struct {
	Limit int
	Host  string
}

// Acquire runs the acquire transaction, together with the other token operations
// this process has queued on the task. It returns an error only when the transaction failed; a
// denial is a result.
func (s *Store) Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error) {
	o := &op{request: request{acquire: &req}, ctx: ctx}
	s.submit(req.TaskID, o)
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
WITH ins AS (
    INSERT INTO taskling.task_execution (
        task_id, started_at, completed_at, last_keep_alive, host_name, death_mode,
        keep_alive_interval, keep_alive_death_threshold, override_threshold,
        reference_value, idempotent, header, blocked, blocked_reason, scheduled_for, library_version)
    VALUES ($1, clock_timestamp(), clock_timestamp(), clock_timestamp(), $2, $3, $4, $5, $6,
        $7, $8, $9, true, $10, $11, $12)
    RETURNING id
)
INSERT INTO taskling.task_execution_event (execution_id, event_type, message)
SELECT id, e.t, e.m FROM ins, unnest($13::smallint[], ARRAY[NULL, $10, NULL]::text[]) WITH ORDINALITY AS e(t, m, n)
ORDER BY e.n
RETURNING execution_id`

// RecordBlocked records a denied attempt without running the token logic: a requester that
// waited for a slot until its context ended records its attempt this way, once.
func (s *Store) RecordBlocked(ctx context.Context, req AcquireRequest, reason string) (int64, error) {
	d := req.Declared
	var header any
	if req.Header != nil {
		header = string(req.Header)
	}
	rows, err := s.pool.Query(ctx, insertBlockedSQL, req.TaskID, req.Host, d.DeathMode,
		d.KeepAliveInterval, d.KeepAliveDeathThreshold, d.OverrideThreshold,
		req.ReferenceValue, req.Idempotent, header, reason, req.ScheduledFor, s.opts.LibraryVersion,
		[]int16{eventStart, eventBlocked, eventEnd})
	if err != nil {
		return 0, fmt.Errorf("execution: record blocked attempt of %s: %w", req.TaskName, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("execution: record blocked attempt of %s: %w", req.TaskName, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return ids[0], nil
}

// executionRows are the rows the second round trip inserts, as column arrays.
type executionRows struct {
	ids          []int64
	hosts        []string
	modes        []int16
	kai, kadt    []time.Duration
	ot           []time.Duration
	refs         []*string
	idempotent   []bool
	headers      []*string
	blocked      []bool
	reasons      []*string
	tokenIDs     []*string
	fences       []*int64
	scheduledFor []*time.Time

	eventExec []int64
	eventType []int16
	eventMsg  []*string
}

// executionRows collects the execution rows and their events that plan inserts.
func (s *Store) executionRows(reqs []request, plan *txPlan) *executionRows {
	w := &executionRows{}
	for _, i := range plan.inserts {
		w.add(reqs[i].acquire, &plan.outcomes[i].acquire)
	}
	return w
}

func (w *executionRows) args(taskID int64, version string) []any {
	return []any{taskID, version, w.ids, w.hosts, w.modes, w.kai, w.kadt, w.ot,
		w.refs, w.idempotent, w.headers, w.blocked, w.reasons, w.tokenIDs, w.fences, w.scheduledFor}
}

func (w *executionRows) add(req *AcquireRequest, res *AcquireResult) {
	e := res.Effective
	w.ids = append(w.ids, res.ExecutionID)
	w.hosts = append(w.hosts, req.Host)
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
	w.eventExec = append(w.eventExec, res.ExecutionID)
	w.eventType = append(w.eventType, eventStart)
	w.eventMsg = append(w.eventMsg, nil)
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
	w.eventExec = append(w.eventExec, res.ExecutionID, res.ExecutionID)
	w.eventType = append(w.eventType, eventBlocked, eventEnd)
	w.eventMsg = append(w.eventMsg, &reason, nil)
}

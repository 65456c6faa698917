package execution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// aliveSQL judges a task_execution row on the DB clock at this moment. It is the one predicate of
// liveness: a holder is dead strictly after its threshold.
const aliveSQL = `(CASE death_mode
    WHEN 1 THEN clock_timestamp() - last_keep_alive <= keep_alive_death_threshold
    ELSE clock_timestamp() - started_at <= override_threshold END)`

// expiresInSQL is how long from now, on the DB clock, until the row's holder may be judged dead,
// in microseconds (negative once dead).
const expiresInSQL = `(extract(epoch FROM (CASE death_mode
    WHEN 1 THEN last_keep_alive + keep_alive_death_threshold
    ELSE started_at + override_threshold END) - clock_timestamp()) * 1000000)::bigint`

// lockTaskSQL is the first write of every token transaction: it takes the task row's lock before
// anything is read, reserves an execution id and returns the row as it is under the lock.
const lockTaskSQL = `
UPDATE taskling.task_definition
SET hold_lock_execution_id = nextval('taskling.task_execution_id_seq')
WHERE id = $1
RETURNING hold_lock_execution_id, tokens, fence,
    concurrency_limit, enabled, death_mode, keep_alive_interval, keep_alive_death_threshold,
    override_threshold, declared_limit, declared_by, coalesce(waiters_until > clock_timestamp(), false)`

// moreIDsSQL reserves the ids of the other executions a batch may insert.
const moreIDsSQL = `SELECT nextval('taskling.task_execution_id_seq') FROM generate_series(1, $1)`

// holdersSQL lists the executions that may hold a slot of the task, with their liveness judged
// while the row lock is held. Served by task_execution_holders_idx.
const holdersSQL = `
SELECT id, ` + aliveSQL + `, ` + expiresInSQL + `
FROM taskling.task_execution
WHERE task_id = $1 AND completed_at IS NULL AND token_id IS NOT NULL AND reclaimed_at IS NULL`

// duplicatesSQL finds executions of the task with one of the reference values that succeeded or
// are still running and alive. Served by task_execution_reference_idx.
const duplicatesSQL = `
SELECT id, reference_value FROM taskling.task_execution
WHERE task_id = $1 AND reference_value = ANY($2) AND token_id IS NOT NULL
  AND NOT blocked AND NOT failed AND reclaimed_at IS NULL
  AND (completed_at IS NOT NULL OR ` + aliveSQL + `)`

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
const reclaimSQL = `
WITH r AS (
    UPDATE taskling.task_execution SET reclaimed_at = clock_timestamp()
    WHERE id = ANY($1) AND completed_at IS NULL AND reclaimed_at IS NULL
    RETURNING id, ` + aliveSQL + ` AS alive
)
SELECT count(*) FILTER (WHERE NOT alive OR taskling.serialization_conflict('execution ' || id || ' renewed its lease while being reclaimed'))
FROM r`

// Event types stored in task_execution_event.event_type.
const (
	EventStart      int16 = 1
	EventCheckpoint int16 = 2
	EventError      int16 = 3
	EventEnd        int16 = 4
	EventBlocked    int16 = 5
)

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

type holder struct {
	alive     bool
	expiresIn time.Duration
}

// Acquire runs the acquire transaction (DESIGN §5), together with the other token operations
// this process has queued on the task. It returns an error only when the transaction failed; a
// denial is a result.
func (s *Store) Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error) {
	o := &op{acquire: &req, ctx: ctx}
	s.submit(req.TaskID, o)
	if o.err != nil {
		return AcquireResult{}, fmt.Errorf("execution: acquire %s: %w", req.TaskName, o.err)
	}
	return o.acquireRes, nil
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

// errRollback ends a transaction that must write nothing; Acquire turns it into a result.
var errRollback = errors.New("rollback")

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
SELECT id, e.t, e.m FROM ins, unnest(ARRAY[1, 5, 4]::smallint[], ARRAY[NULL, $10, NULL]::text[]) WITH ORDINALITY AS e(t, m, n)
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
	rows, err := s.pool.Query(ctx, insertBlockedSQL, req.TaskID, req.Host, int16(d.DeathMode),
		d.KeepAliveInterval, d.KeepAliveDeathThreshold, d.OverrideThreshold,
		req.ReferenceValue, req.Idempotent, header, reason, req.ScheduledFor, s.opts.LibraryVersion)
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

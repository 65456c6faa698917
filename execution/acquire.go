package execution

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

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

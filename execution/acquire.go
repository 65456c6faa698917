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
	// DeniedKeyLimit: the start's key is at its limit (the task has room).
	DeniedKeyLimit
	// DeniedRate: the task's rate has no room now (AcquireResult.RetryAfter says for how long).
	DeniedRate
	// DeniedKeyRate: the start's key's rate has no room now.
	DeniedKeyRate
)

// The operations of the grant protocol on a task's slots each have a request type: Acquire (a
// start: granted now or denied, or queued when it asks to wait), ClaimInstant (a start that claims
// a cron instant), StartAttempt (a start that starts a claimed submission's attempt), Leave (a
// waiter that gives up its ticket), Reap (take the slots of dead holders, granting nothing), and
// TakeHandoff (take the slot granted to a direct ticket). Each is served by a token transaction
// (or, for TakeHandoff, a statement of its own), combined with the process's other operations.

// Requester is who asks: the part every operation's request shares.
type Requester struct {
	TaskID   int64
	TaskName string // "app/task", for error messages
	Host     string
	// SessionID is the requester's session (RegisterSession): a holder in KeepAlive mode lives
	// by its heartbeat, and so does a ticket.
	SessionID int64
	// Declared are the requester's settings (defaults, config and code), before operator
	// overrides. They must be valid.
	Declared Settings
}

// AcquireRequest asks for a slot of a task: granted, or denied (Queue: queued).
type AcquireRequest struct {
	Requester
	ReferenceValue *string
	// Idempotent allows one successful execution per ReferenceValue (see StartOptions).
	Idempotent bool
	Header     []byte // JSON, or nil
	// ScheduledFor is the cron instant the execution runs (Backfill), without a claim.
	ScheduledFor *time.Time
	// RecordDenial writes a denied attempt as a Blocked execution. When false (an attempt in a
	// wait loop), a denied attempt writes no execution; it marks the task as waited for (for the
	// next 60 s), so that releases notify the waiters. Wait loops must retry within 60 s.
	RecordDenial bool
	// Queue, when set, queues the requester when it is denied: a ticket in the task's row,
	// oldest first across every host, higher priority first. Later attempts pass the ticket they
	// got (Queue.Ticket).
	Queue *Queue
	// NewTokenID makes token ids (tests); nil means uuid.New.
	NewTokenID func() uuid.UUID
	// Key is the start's key ("": none) and Cost the slots it takes (0 means 1): its holders'
	// costs may not exceed the task's limit together, nor those of one key its key's limit
	// (Declared.KeyLimit, KeyLimits, under the overrides). Keys need grant protocol 6.
	Key  string
	Cost int
}

// Queue is how a requester waits for a slot. A ticket lives by the session's heartbeat
// (Declared.KeepAliveDeathThreshold), and a slot offered or granted to it that is not taken
// within OfferWindow passes to the next ticket.
type Queue struct {
	Ticket      int64 // 0 for the first attempt
	Priority    int
	OfferWindow time.Duration
	// Direct asks for a direct ticket (protocol 4, handoff.go): a slot freed while it is first in
	// line is granted to it at once, and its waiter takes it with TakeHandoff. Only for a plain
	// start: no idempotent reference, cron instant, submission or critical section.
	Direct bool
}

// ClaimInstantRequest is an acquisition that claims a cron instant (see ScheduleClaim). It runs
// in a transaction of its own: a lost claim aborts it.
type ClaimInstantRequest struct {
	AcquireRequest
	Instant time.Time
	Claim   ScheduleClaim
}

// StartAttemptRequest is an acquisition whose grant starts the next attempt of Submission, a
// waiting submission claimed by the requester's session, under the execution, in the same
// transaction (AcquireResult.Attempt).
type StartAttemptRequest struct {
	AcquireRequest
	Submission int64
}

// LeaveRequest removes a waiter's ticket from the queue (it gave up); a slot offered or granted
// to it passes to the next ticket.
type LeaveRequest struct {
	Requester
	Ticket int64
}

// ReapRequest takes the slots of every holder of the task judged dead, and grants nothing: the
// reclaims a grant would make, without the grant.
type ReapRequest struct {
	Requester
}

// opKind is the operation an acquisition is.
type opKind int

const (
	opAcquire opKind = iota // Acquire, ClaimInstant, StartAttempt
	opLeave
	opReap
)

// acquisition is every operation but a release, as the token transaction decides it.
type acquisition struct {
	kind opKind
	AcquireRequest
	// Schedule, with ScheduledFor, claims a cron instant.
	Schedule *ScheduleClaim
	// Submission starts a claimed submission's attempt.
	Submission int64
}

// ticket is the requester's ticket (0: none).
func (a *acquisition) ticket() int64 {
	if a.Queue == nil {
		return 0
	}
	return a.Queue.Ticket
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
	// QueuedAt is when that ticket was queued, on the database clock (a ticket whose offer
	// lapsed is queued again, from then).
	QueuedAt time.Time
	// Direct: the ticket is direct (Queue.Direct was honoured). HandedOff: a slot is
	// granted to it; take it with TakeHandoff.
	Direct, HandedOff bool
	// Reclaimed lists the dead holders whose slots this acquisition took or removed (set once
	// the transaction committed).
	Reclaimed []int64
	// Attempt is the attempt of StartAttemptRequest.Submission the grant started; 0 when it did not
	// (the submission was cancelled, or its claim lapsed and another worker took it).
	Attempt int
	// KeyLimit is the limit in force for the start's key (0: none), in a keyed decision.
	KeyLimit int
	// Rate is the rate that refused the start (DeniedRate, DeniedKeyRate), and RetryAfter how
	// long until the start would fit it, on the database clock.
	Rate       Rate
	RetryAfter time.Duration
	// Unfit says the start's cost exceeds the task's or its key's limit in force: it is denied
	// (DeniedLimit or DeniedKeyLimit) and never queued; a ticket that no longer fits is dropped.
	Unfit *Unfit
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
	return s.serve(ctx, &acquisition{kind: opAcquire, AcquireRequest: req}, "acquire")
}

// ClaimInstant is Acquire claiming a cron instant.
func (s *Store) ClaimInstant(ctx context.Context, req ClaimInstantRequest) (AcquireResult, error) {
	a := &acquisition{kind: opAcquire, AcquireRequest: req.AcquireRequest, Schedule: &req.Claim}
	a.ScheduledFor = &req.Instant
	return s.serve(ctx, a, "claim an instant of")
}

// StartAttempt is Acquire starting a claimed submission's attempt.
func (s *Store) StartAttempt(ctx context.Context, req StartAttemptRequest) (AcquireResult, error) {
	return s.serve(ctx, &acquisition{kind: opAcquire, AcquireRequest: req.AcquireRequest, Submission: req.Submission},
		"start an attempt of")
}

// Leave removes a waiter's ticket.
func (s *Store) Leave(ctx context.Context, req LeaveRequest) error {
	_, err := s.serve(ctx, &acquisition{kind: opLeave, AcquireRequest: AcquireRequest{Requester: req.Requester,
		Queue: &Queue{Ticket: req.Ticket}}}, "leave the queue of")
	return err
}

// Reap takes the slots of the task's dead holders.
func (s *Store) Reap(ctx context.Context, req ReapRequest) (AcquireResult, error) {
	return s.serve(ctx, &acquisition{kind: opReap, AcquireRequest: AcquireRequest{Requester: req.Requester}}, "reap")
}

// serve runs an acquisition in a token transaction.
func (s *Store) serve(ctx context.Context, a *acquisition, what string) (AcquireResult, error) {
	o := &op{request: request{acquire: a}, ctx: ctx}
	s.submit(o)
	if err := o.err(); err != nil {
		return AcquireResult{}, fmt.Errorf("%s %s: %w", what, a.TaskName, err)
	}
	return o.outcome.acquire, nil
}

func denyMessage(r DenyReason, limit int) string {
	switch r {
	case DeniedDuplicate:
		return "an execution with this reference value already succeeded or is running"
	case DeniedLimit:
		return fmt.Sprintf("concurrency limit %d reached", limit)
	case DeniedKeyLimit:
		return "its key's limit reached"
	case DeniedRate:
		return "its rate has no room"
	case DeniedKeyRate:
		return "its key's rate has no room"
	}
	return "denied"
}

const insertBlockedSQL = `
INSERT INTO taskling.task_execution (
    task_id, started_at, completed_at, last_keep_alive, host_name, session_id, death_mode,
    keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, scheduled_for, library_version, key, cost)
VALUES ($1, clock_timestamp(), clock_timestamp(), clock_timestamp(), $2, nullif($3, 0), $4, $5, $6, $7,
    $8, $9, $10, true, $11, $12, $13, $14, $15)
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
	args := []any{req.TaskID, req.Host, req.SessionID, d.DeathMode, d.KeepAliveInterval, d.KeepAliveDeathThreshold, d.OverrideThreshold,
		req.ReferenceValue, req.Idempotent, header, reason, req.ScheduledFor, s.opts.LibraryVersion}
	sql := p5InsertBlockedSQL
	if err := s.detectEpochs(ctx); err != nil {
		return 0, err
	}
	if s.epochs.keys.Load() {
		sql, args = insertBlockedSQL, append(args, req.Key, int32(max(req.Cost, 1)))
	}
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record blocked attempt of %s: %w", req.TaskName, err)
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
	keys                 []string
	costs                []int32
}

// args are the statement's arguments; keyed: with the keys and costs (a schema of 0022).
func (w *executionRows) args(version string, keyed bool) []any {
	a := []any{version, w.ids, w.tasks, w.hosts, w.sessions, w.modes, w.kai, w.kadt, w.ot,
		w.refs, w.idempotent, w.headers, w.blocked, w.reasons, w.tokenIDs, w.fences, w.scheduledFor}
	if keyed {
		a = append(a, w.keys, w.costs)
	}
	return a
}

func (w *executionRows) add(req *acquisition, res *AcquireResult) {
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
	w.keys, w.costs = append(w.keys, req.Key), append(w.costs, int32(req.cost()))
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

package execution

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/tokens"
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
// anything is read, reserves the new execution's id and returns the row as it is under the lock.
const lockTaskSQL = `
UPDATE taskling.task_definition
SET hold_lock_execution_id = nextval('taskling.task_execution_id_seq')
WHERE id = $1
RETURNING hold_lock_execution_id, tokens, fence,
    concurrency_limit, enabled, death_mode, keep_alive_interval, keep_alive_death_threshold,
    override_threshold, declared_limit, declared_by`

// holdersSQL lists the executions that may hold a slot of the task, with their liveness judged
// while the row lock is held. Served by task_execution_holders_idx.
const holdersSQL = `
SELECT id, ` + aliveSQL + `, ` + expiresInSQL + `
FROM taskling.task_execution
WHERE task_id = $1 AND completed_at IS NULL AND token_id IS NOT NULL AND reclaimed_at IS NULL`

// duplicateSQL finds an execution of the task with the same reference value that succeeded or is
// still running and alive. Served by task_execution_reference_idx.
const duplicateSQL = `
SELECT EXISTS (
    SELECT 1 FROM taskling.task_execution
    WHERE task_id = $1 AND reference_value = $2 AND token_id IS NOT NULL
      AND NOT blocked AND NOT failed AND reclaimed_at IS NULL
      AND (completed_at IS NOT NULL OR ` + aliveSQL + `))`

const updateTokensSQL = `
UPDATE taskling.task_definition
SET tokens = $2, fence = $3,
    declared_at = CASE WHEN declared_limit IS DISTINCT FROM $4 OR declared_by IS DISTINCT FROM $5
                       THEN clock_timestamp() ELSE declared_at END,
    declared_limit = $4, declared_by = $5
WHERE id = $1`

const insertExecutionSQL = `
INSERT INTO taskling.task_execution (
    id, task_id, started_at, completed_at, last_keep_alive, host_name,
    death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold,
    reference_value, idempotent, header, blocked, blocked_reason, token_id, fence,
    scheduled_for, library_version)
VALUES ($1, $2, clock_timestamp(), CASE WHEN $12 THEN clock_timestamp() END, clock_timestamp(), $3,
    $4, $5, $6, $7, $8, $9, $10, $12, $13, $14, $15, $16, $11)
RETURNING started_at`

const insertEventsSQL = `
INSERT INTO taskling.task_execution_event (execution_id, event_type, message)
SELECT $1, e.t, e.m FROM unnest($2::smallint[], $3::text[]) WITH ORDINALITY AS e(t, m, n)
ORDER BY e.n`

// reclaimSQL marks the dead holders whose slots this transaction takes. Each row is rechecked
// under its own row lock: a holder that renewed its lease since the read aborts the transaction
// (with a serialization failure, so it is retried and sees the holder alive). Under SERIALIZABLE
// PostgreSQL would catch that anyway; under READ COMMITTED this check is what prevents the grant.
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
	// RecordDenial writes a denied attempt as a Blocked execution. When false (an attempt in a
	// wait loop), a denied attempt writes nothing.
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
	// Reclaimed lists dead holders whose slots this transaction took or removed.
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

// Acquire runs the acquire transaction (DESIGN §5). It returns an error only when the
// transaction failed; a denial is a result.
func (s *Store) Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error) {
	var res AcquireResult
	err := s.inTx(ctx, req.TaskID, func(ctx context.Context, tx *txConn) error {
		var err error
		res, err = s.acquireOnce(ctx, tx, req)
		return err
	})
	if errors.Is(err, errRollback) {
		return res, nil
	}
	if err != nil {
		return AcquireResult{}, fmt.Errorf("execution: acquire %s: %w", req.TaskName, err)
	}
	return res, nil
}

func (s *Store) acquireOnce(ctx context.Context, tx *txConn, req AcquireRequest) (AcquireResult, error) {
	var res AcquireResult

	// Round trip 1: BEGIN; write (lock + reserve id) and read; liveness of the holders.
	b := &pgx.Batch{}
	b.Queue(lockTaskSQL, req.TaskID)
	b.Queue(holdersSQL, req.TaskID)
	if req.Idempotent && req.ReferenceValue != nil {
		b.Queue(duplicateSQL, req.TaskID, *req.ReferenceValue)
	}
	res.SentAt = time.Now()
	br := tx.first(ctx, b)
	var (
		execID        int64
		tokenText     string
		fence         int64
		ov            Overrides
		ovMode        *int16
		declaredLimit *int
		declaredBy    *string
	)
	err := br.QueryRow().Scan(&execID, &tokenText, &fence, &ov.ConcurrencyLimit, &ov.Enabled, &ovMode,
		&ov.KeepAliveInterval, &ov.KeepAliveDeathThreshold, &ov.OverrideThreshold, &declaredLimit, &declaredBy)
	if errors.Is(err, pgx.ErrNoRows) {
		_ = br.Close()
		return res, fmt.Errorf("task row %d is gone", req.TaskID)
	}
	if err != nil {
		_ = br.Close()
		return res, err
	}
	if ovMode != nil {
		m := DeathMode(*ovMode)
		ov.DeathMode = &m
	}
	holders := map[int64]holder{}
	rows, _ := br.Query()
	for rows.Next() {
		var id, expiresUS int64
		var alive bool
		if err := rows.Scan(&id, &alive, &expiresUS); err != nil {
			rows.Close()
			_ = br.Close()
			return res, err
		}
		holders[id] = holder{alive: alive, expiresIn: time.Duration(expiresUS) * time.Microsecond}
	}
	if err := rows.Err(); err != nil {
		_ = br.Close()
		return res, err
	}
	duplicate := false
	if req.Idempotent && req.ReferenceValue != nil {
		if err := br.QueryRow().Scan(&duplicate); err != nil {
			_ = br.Close()
			return res, err
		}
	}
	if err := br.Close(); err != nil {
		return res, err
	}

	// Pure token logic.
	res.Effective = ov.Apply(req.Declared)
	res.Overridden = !ov.IsZero()
	if err := res.Effective.Validate("with operator overrides"); err != nil {
		return res, fmt.Errorf("task %s: %w", req.TaskName, err)
	}
	if !res.Effective.Enabled {
		res.Denied = DeniedDisabled
		return res, errRollback // nothing is written for a disabled task
	}
	if declaredLimit != nil && declaredBy != nil && *declaredLimit != req.Declared.ConcurrencyLimit && *declaredBy != req.Host {
		res.ConflictingDeclaration = &Declaration{Limit: *declaredLimit, Host: *declaredBy}
	}
	list, err := tokens.Parse(tokenText)
	if err != nil {
		return res, fmt.Errorf("task %s: stored token list: %w", req.TaskName, err)
	}
	alive := func(id int64) bool { h, ok := holders[id]; return ok && h.alive }
	newID := req.NewTokenID
	if newID == nil {
		newID = uuid.New
	}
	adopt := make([]int64, 0, len(holders))
	if list.IsUnlimited() || len(list.Tokens) == 0 {
		for id, h := range holders {
			if h.alive {
				adopt = append(adopt, id)
			}
		}
		sort.Slice(adopt, func(i, j int) bool { return adopt[i] < adopt[j] })
	}
	list, reclaimed, err := list.Adjust(res.Effective.ConcurrencyLimit, alive, adopt, newID)
	if err != nil {
		return res, fmt.Errorf("task %s: %w", req.TaskName, err)
	}
	var grant tokens.GrantResult
	switch {
	case duplicate:
		res.Denied = DeniedDuplicate
	default:
		list, grant = list.Grant(execID, alive)
		if !grant.Granted {
			res.Denied = DeniedLimit
		} else if grant.Reclaimed != 0 {
			reclaimed = append(reclaimed, grant.Reclaimed)
		}
	}
	if res.Denied == DeniedLimit {
		for _, id := range list.Grantees() {
			if h, ok := holders[id]; ok && h.alive && (res.NextExpiry == 0 || h.expiresIn < res.NextExpiry) {
				res.NextExpiry = max(h.expiresIn, time.Millisecond)
			}
		}
	}
	if res.Denied != NotDenied && !req.RecordDenial {
		return res, errRollback
	}

	// Round trip 2: write the tokens, the execution, its events, the reclaims; COMMIT.
	if grant.Granted {
		fence++
		res.Fence, res.TokenID = fence, grant.TokenID
	}
	res.ExecutionID, res.Reclaimed = execID, reclaimed
	e := res.Effective
	var tokenID *uuid.UUID
	var execFence *int64
	if grant.Granted {
		tokenID, execFence = &grant.TokenID, &fence
	}
	blocked := res.Denied != NotDenied
	var reason *string
	events, messages := []int16{EventStart}, []*string{nil}
	if blocked {
		r := denyMessage(res.Denied, e.ConcurrencyLimit)
		reason = &r
		events, messages = append(events, EventBlocked, EventEnd), append(messages, &r, nil)
	}
	var header any
	if req.Header != nil {
		header = string(req.Header)
	}
	b = &pgx.Batch{}
	b.Queue(updateTokensSQL, req.TaskID, list.String(), fence, req.Declared.ConcurrencyLimit, req.Host)
	b.Queue(insertExecutionSQL, execID, req.TaskID, req.Host,
		int16(e.DeathMode), e.KeepAliveInterval, e.KeepAliveDeathThreshold, e.OverrideThreshold,
		req.ReferenceValue, req.Idempotent, header, s.opts.LibraryVersion,
		blocked, reason, tokenID, execFence, req.ScheduledFor)
	b.Queue(insertEventsSQL, execID, events, messages)
	if len(reclaimed) > 0 {
		b.Queue(reclaimSQL, reclaimed)
	}
	br = tx.last(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return res, err
	}
	if err := br.QueryRow().Scan(&res.StartedAt); err != nil {
		return res, err
	}
	if _, err := br.Exec(); err != nil {
		return res, err
	}
	if len(reclaimed) > 0 {
		var n int64
		if err := br.QueryRow().Scan(&n); err != nil {
			return res, err
		}
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return res, err
	}
	tx.open = false
	return res, nil
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

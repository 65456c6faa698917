package adminstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/tokens"
)

// Read-only queries for operators (the CLI, the HTTP API, metrics). They never take the task
// row's lock, so they cannot slow the acquire path down; what they report is a snapshot judged
// on the DB clock at the moment they run.

// Sources of the limit in force (TaskSummary.LimitSource; taskling.LimitSource's values).
const (
	limitSourceOverride = "override" // an operator's override stored in the task row
	limitSourceDeclared = "declared" // the limit last declared by a requester (its code or config)
	limitSourceNone     = "none"     // nothing declared yet: the task row exists but was never acquired
)

// TaskSummary is one task as `tasks list` shows it.
type TaskSummary struct {
	ID          int64
	Application string
	Task        string
	// Limit in force: the operator's override if set, else the last requester's declared limit;
	// -1 unlimited, 0 when LimitSource is LimitSourceNone.
	Limit int
	// LimitSource is "override", "declared" or "none".
	LimitSource   string
	DeclaredLimit *int
	DeclaredBy    *string
	// Dispute is the last time a host's declaration replaced a different limit declared by
	// another host, within DisputeWindow; nil if none.
	Dispute *Dispute
	// SlotsUsed counts the slots held by live executions (for an unlimited task: its live
	// executions); SlotsTotal is the limit in force (-1 unlimited), which the token list — and
	// so TaskSlots — matches from the next acquisition on.
	SlotsUsed  int
	SlotsTotal int
	// SlotsRetiring counts held slots marked for removal after a lowered limit.
	SlotsRetiring int
	Fence         int64
	Overrides     execution.Overrides
	// LastExecution is the newest execution of the task, granted or denied; nil if none.
	LastExecution *LastExecution
	// Waiting counts the live waiters queued for a slot; OldestWait is when the oldest of them
	// queued (zero if none).
	Waiting    int
	OldestWait time.Time
	// Retired: the task is retired (nil if not); ScheduleRetired: its schedule is. execution.Overrides
	// hold a retired task's enabled override as it was set (its row says disabled).
	Retired         *Retirement
	HasSchedule     bool
	ScheduleRetired *Retirement
	// Declaration is what the task's hosts last declared beyond the limit (nil: nothing yet).
	Declaration *DeclaredSettings
}

// Dispute is a declaration of a task's limit that another host's replaced.
type Dispute struct {
	Limit int
	Host  string
	At    time.Time // when it was replaced, on the database clock
}

// DisputeWindow is how long a disagreement between hosts' declarations is reported.
const DisputeWindow = 10 * time.Minute

// RecordDispute records that host declared limit for a task whose declaration by another host
// was a different one (AcquireResult.ConflictingDeclaration). Outside any token transaction.
func (s *Store) RecordDispute(ctx context.Context, taskID int64, other execution.Declaration, limit int, host string) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO taskling.declaration_dispute (task_id, other_limit, other_host, declared_limit, declared_by)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (task_id) DO UPDATE SET other_limit = excluded.other_limit, other_host = excluded.other_host,
    declared_limit = excluded.declared_limit, declared_by = excluded.declared_by, at = clock_timestamp()`,
		taskID, other.Limit, other.Host, limit, host)
	if err != nil {
		return fmt.Errorf("record the disagreement on task %d: %w", taskID, err)
	}
	return nil
}

// LastExecution is the newest execution of a task.
type LastExecution struct {
	ID        int64
	Status    string
	StartedAt time.Time
}

// TaskSummary returns one task, or ok=false if it does not exist.
func (s *Store) TaskSummary(ctx context.Context, app, task string) (TaskSummary, bool, error) {
	rows, err := s.db.Query(ctx, `SELECT * FROM taskling.task_summary WHERE application_name = $1 AND task_name = $2`, app, task)
	if err != nil {
		return TaskSummary{}, false, fmt.Errorf("task %s/%s: %w", app, task, err)
	}
	out, err := pgx.CollectRows(rows, scanSummary)
	if err != nil {
		return TaskSummary{}, false, fmt.Errorf("task %s/%s: %w", app, task, err)
	}
	if len(out) == 0 {
		return TaskSummary{}, false, nil
	}
	return out[0], true, nil
}

func scanSummary(row pgx.CollectableRow) (TaskSummary, error) { return scanSummaryWith(row) }

// scanSummaryWith scans a summary row after the leading columns into lead.
func scanSummaryWith(row pgx.CollectableRow, lead ...any) (TaskSummary, error) {
	var (
		t          TaskSummary
		tokenText  string
		ids        []int64
		alive      []bool
		lastID     *int64
		lastStatus *string
		lastAt     *time.Time
		oldest     *time.Time
		dLimit     *int
		dBy        *string
		dAt        *time.Time
		rAt, sAt   *time.Time
		rBy, sBy   *string
		rEnabled   *bool
		decl       declaredColumns
	)
	err := row.Scan(append(lead, &t.ID, &t.Application, &t.Task, &tokenText, &t.Fence,
		&t.Overrides.ConcurrencyLimit, &t.Overrides.Enabled, &t.Overrides.DeathMode, &t.Overrides.KeepAliveInterval,
		&t.Overrides.KeepAliveDeathThreshold, &t.Overrides.OverrideThreshold, &t.Overrides.UpdatedAt,
		&t.DeclaredLimit, &t.DeclaredBy, &dLimit, &dBy, &dAt, &ids, &alive, &lastID, &lastStatus, &lastAt, &t.Waiting, &oldest,
		&rAt, &rBy, &rEnabled, &t.HasSchedule, &sAt, &sBy, &decl.enabled, &decl.mode, &decl.interval, &decl.threshold,
		&decl.overrideThreshold, &decl.by, &decl.at)...)
	if err != nil {
		return t, err
	}
	t.Declaration = decl.settings()
	t.Retired, t.ScheduleRetired = retirementOf(rAt, rBy), retirementOf(sAt, sBy)
	if t.Retired != nil {
		t.Overrides.Enabled = rEnabled // the override as set; the row says disabled while retired
	}
	switch {
	case t.Overrides.ConcurrencyLimit != nil:
		t.Limit, t.LimitSource = *t.Overrides.ConcurrencyLimit, limitSourceOverride
	case t.DeclaredLimit != nil:
		t.Limit, t.LimitSource = *t.DeclaredLimit, limitSourceDeclared
	default:
		t.LimitSource = limitSourceNone
	}
	if oldest != nil {
		t.OldestWait = *oldest
	}
	if dLimit != nil && dAt != nil {
		t.Dispute = &Dispute{Limit: *dLimit, At: *dAt}
		if dBy != nil {
			t.Dispute.Host = *dBy
		}
	}
	if lastID != nil {
		t.LastExecution = &LastExecution{ID: *lastID, Status: *lastStatus, StartedAt: *lastAt}
	}
	list, err := tokens.Parse(tokenText)
	if err != nil {
		return t, fmt.Errorf("task %s/%s: stored token list: %w", t.Application, t.Task, err)
	}
	live := map[int64]bool{}
	liveCount := 0
	for i, id := range ids {
		live[id] = alive[i]
		if alive[i] {
			liveCount++
		}
	}
	// The token list is reconciled to the limit in force by the next acquisition; report the
	// limit in force, so that a changed limit shows at once.
	t.SlotsTotal = list.Limit()
	if t.LimitSource != limitSourceNone {
		t.SlotsTotal = t.Limit
	}
	if list.IsUnlimited() {
		t.SlotsUsed = liveCount
	} else {
		t.SlotsUsed = list.InUse(func(id int64) bool { return live[id] })
	}
	for _, tok := range list.Tokens {
		if tok.Status == tokens.Retiring {
			t.SlotsRetiring++
		}
	}
	return t, nil
}

// Slot is one slot of a task and its holder, as `tasks show` shows it.
type Slot struct {
	TokenID uuid.UUID
	// Status of the token: "held", "available", "retiring" or "unlimited" (one slot per running
	// execution of an unlimited task).
	Status string
	Holder *Holder // nil for an available slot
}

// Holder is the execution a slot was granted to, judged on the DB clock.
type Holder struct {
	ExecutionID int64
	// Found is false when the execution row is missing (the acquire then treats the slot as
	// free); the other fields are then zero.
	Found         bool
	Host          string
	StartedAt     time.Time
	LastKeepAlive time.Time
	HeartbeatAge  time.Duration // DB clock now − last heartbeat
	Alive         bool
	Fence         int64
	ItemsDone     int64 // 0 when not set
	ItemsTotal    int64
}

// holderSQL reads the executions $1 holding a task's slots, judged on the DB clock.
const holderSQL = `
SELECT e.id, e.host_name, e.started_at, taskling.execution_last_heartbeat(e, x, s.last_heartbeat),
    (extract(epoch FROM clock_timestamp() - taskling.execution_last_heartbeat(e, x, s.last_heartbeat)) * 1000000)::bigint,
    taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress',
    coalesce(e.fence, 0), coalesce(e.items_done, 0), coalesce(e.items_total, 0)
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE e.id = ANY($1)
ORDER BY e.id`

// TaskSlots returns the slots of a task with their holders, in token-list order (for an
// unlimited task: one slot per execution that may hold it). The token list and the holders are
// read in one snapshot.
func (s *Store) TaskSlots(ctx context.Context, taskID int64) ([]Slot, error) {
	var out []Slot
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var text, holdersText string
		if err := tx.QueryRow(ctx, `SELECT tokens, holders FROM taskling.task_definition WHERE id = $1`, taskID).Scan(&text, &holdersText); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		list, err := tokens.Parse(text)
		if err != nil {
			return fmt.Errorf("stored token list: %w", err)
		}
		held, err := execution.HolderExecutions(holdersText)
		if err != nil {
			return fmt.Errorf("stored holders: %w", err)
		}
		unlimited := list.IsUnlimited()
		ids := list.Grantees()
		if unlimited {
			ids = held
		}
		rows, err := tx.Query(ctx, holderSQL, ids)
		if err != nil {
			return err
		}
		holders := map[int64]*Holder{}
		var order []int64
		for rows.Next() {
			h := &Holder{Found: true}
			var ageUS int64
			if err := rows.Scan(&h.ExecutionID, &h.Host, &h.StartedAt, &h.LastKeepAlive, &ageUS, &h.Alive,
				&h.Fence, &h.ItemsDone, &h.ItemsTotal); err != nil {
				rows.Close()
				return err
			}
			h.HeartbeatAge = time.Duration(ageUS) * time.Microsecond
			holders[h.ExecutionID] = h
			order = append(order, h.ExecutionID)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if unlimited {
			for _, id := range order {
				out = append(out, Slot{TokenID: list.Tokens[0].ID, Status: tokens.Unlimited.String(), Holder: holders[id]})
			}
			return nil
		}
		for _, tok := range list.Tokens {
			slot := Slot{TokenID: tok.ID, Status: tok.Status.String()}
			if (tok.Status == tokens.Held || tok.Status == tokens.Retiring) && tok.Grantee != 0 {
				if h, ok := holders[tok.Grantee]; ok {
					slot.Holder = h
				} else {
					slot.Holder = &Holder{ExecutionID: tok.Grantee}
				}
			}
			out = append(out, slot)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("slots of task %d: %w", taskID, err)
	}
	return out, nil
}

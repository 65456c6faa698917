package taskling

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/execution"
)

// Status is an execution's status, derived on the database clock when it is read.
type Status string

const (
	// StatusInProgress: granted, not completed, and alive (heartbeat or override time not yet passed).
	StatusInProgress Status = "in_progress"
	// StatusCompleted: completed without being marked failed.
	StatusCompleted Status = "completed"
	// StatusFailed: completed after RecordError(…, true), or Run's function failed.
	StatusFailed Status = "failed"
	// StatusBlocked: denied (limit reached, duplicate reference, or gave up waiting).
	StatusBlocked Status = "blocked"
	// StatusDead: stopped without completing (its death threshold passed, in either death mode),
	// or its slot was reclaimed by another execution.
	StatusDead Status = "dead"
	// StatusWaiting: a WaitForSlot start queued for a slot (LastExecutions only; it has no
	// execution yet: ID is its ticket, StartedAt when it queued, Position its place in line).
	StatusWaiting Status = "waiting"
)

// Statuses are the statuses an execution can have, in the order they are documented (the ones
// history filters take; StatusWaiting is a queued start's, in LastExecutions only).
var Statuses = [...]Status{StatusInProgress, StatusCompleted, StatusFailed, StatusBlocked, StatusDead}

const statusList = "in_progress, completed, failed, blocked or dead"

// ExecutionInfo is one execution of a task, as history reports it.
type ExecutionInfo struct {
	ID             int64
	StartedAt      time.Time
	CompletedAt    time.Time // zero while not completed
	Status         Status
	ReferenceValue string
	Host           string
	ItemsDone      int64
	ItemsTotal     int64
	FencingToken   int64 // 0 for a blocked attempt
	Header         json.RawMessage
	// HeaderError says why Header is nil although the execution has one: encoding/json cannot
	// read the stored value (nested deeper than 10 000, written with SQL).
	HeaderError   string
	BlockedReason string
	ReclaimedAt   time.Time // zero unless another execution took its slot
	// LastHeartbeat is the last heartbeat on the database clock (the start time until the first).
	LastHeartbeat time.Time
	// LibraryVersion is the taskling version of the process that started it.
	LibraryVersion string
	// ScheduledFor is the cron instant a scheduler run (or a Blocked overlap-skipped instant)
	// was for; zero for other executions.
	ScheduledFor time.Time
	// Position is a waiting start's place in the queue for a slot (1: next); 0 otherwise.
	Position int
}

func infoFromRow(r execution.ExecutionRow) ExecutionInfo {
	info := ExecutionInfo{ID: r.ID, StartedAt: r.StartedAt, Status: Status(r.Status), Host: r.Host,
		LastHeartbeat: r.LastKeepAlive, LibraryVersion: r.LibraryVersion}
	info.Header, info.HeaderError = storedJSON(r.Header)
	if r.CompletedAt != nil {
		info.CompletedAt = *r.CompletedAt
	}
	if r.ReferenceValue != nil {
		info.ReferenceValue = *r.ReferenceValue
	}
	if r.ItemsDone != nil {
		info.ItemsDone = *r.ItemsDone
	}
	if r.ItemsTotal != nil {
		info.ItemsTotal = *r.ItemsTotal
	}
	if r.Fence != nil {
		info.FencingToken = *r.Fence
	}
	if r.BlockedReason != nil {
		info.BlockedReason = *r.BlockedReason
	}
	if r.ReclaimedAt != nil {
		info.ReclaimedAt = *r.ReclaimedAt
	}
	if r.ScheduledFor != nil {
		info.ScheduledFor = *r.ScheduledFor
	}
	return info
}

// LastExecutions returns the task's last n executions (granted or denied), newest first, after
// the starts queued for a slot right now (StatusWaiting, in queue order; they count towards n).
// A task never started has none.
func (c *Client) LastExecutions(ctx context.Context, app, task string, n int) ([]ExecutionInfo, error) {
	id, ok, err := c.historyOf(ctx, app, task, n)
	if err != nil || !ok {
		return nil, err
	}
	waiters, err := c.store.Waiters(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]ExecutionInfo, 0, min(n, 64))
	for _, w := range waiters[:min(n, len(waiters))] {
		out = append(out, ExecutionInfo{ID: w.Ticket, Status: StatusWaiting, StartedAt: w.QueuedAt, Host: w.Host, Position: w.Position})
	}
	if n -= len(out); n == 0 {
		return out, nil
	}
	rows, err := c.store.LastExecutions(ctx, id, n)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		out = append(out, infoFromRow(r))
	}
	return out, nil
}

// historyOf checks the arguments of a history query and finds the task; ok is false for a task
// that never started (it has no history).
func (c *Client) historyOf(ctx context.Context, app, task string, n int) (id int64, ok bool, err error) {
	if err := validateTask(app, task); err != nil {
		return 0, false, err
	}
	if n < 1 || n > 10000 {
		return 0, false, fmt.Errorf("%w: n is %d; want 1 to 10000", ErrInvalidArgument, n)
	}
	return c.store.FindTask(ctx, app, task)
}

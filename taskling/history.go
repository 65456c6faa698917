package taskling

import (
	"context"
	"fmt"
)

// Statuses are the statuses an execution can have, in the order they are documented (the ones
// history filters take; StatusWaiting is a queued start's, in LastExecutions only).
var Statuses = [...]Status{StatusInProgress, StatusCompleted, StatusFailed, StatusBlocked, StatusDead}

const statusList = "in_progress, completed, failed, blocked or dead"

// LastExecutions returns the task's last n executions (granted or denied), newest first, after
// the starts queued for a slot right now (StatusWaiting, in queue order; they count towards n).
// A task never started has none.
func (c *Client) LastExecutions(ctx context.Context, app, task string, n int) (_ []ExecutionInfo, err error) {
	defer wrapErr(&err, "last executions of %s/%s", app, task)
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
		out = append(out, ExecutionInfo{ID: w.Ticket, Status: StatusWaiting, StartedAt: w.QueuedAt, Host: w.Host, Position: w.Position,
			Key: w.Key, Cost: w.Cost})
	}
	if n -= len(out); n == 0 {
		return out, nil
	}
	rows, err := c.history.LastExecutions(ctx, id, n)
	if err != nil {
		return nil, err
	}
	return append(out, rows...), nil
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

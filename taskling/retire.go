package taskling

import (
	"context"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/cronspec"
)

// Retirement says when, and by whom, a task or its schedule was retired.
type Retirement struct {
	At time.Time
	By string
}

func retirementOf(r *execution.Retirement) *Retirement {
	if r == nil {
		return nil
	}
	return &Retirement{At: r.At, By: r.By}
}

// RetireTask retires app/task, an operator's way to take a task out of service without losing
// its history:
//
//   - every host refuses its starts from the next one on, with ErrTaskRetired (nothing is
//     written); executions running keep their slots and complete as usual, and waiters for a
//     slot get ErrTaskRetired at once;
//   - its schedule, if it has one, claims no instant (see RetireSchedule);
//   - it leaves the task lists (Tasks, the HTTP API, the dashboard, `taskling tasks list`)
//     unless they ask for TaskRetired; Task, its executions and its audit trail stay readable;
//   - cleanup deletes its history by its keep settings, the latest execution included.
//
// The change is recorded in the task's audit trail as made by by ("" means this client's host
// name). Retiring a retired task changes nothing. The error wraps ErrNotFound when the task does
// not exist.
func (c *Client) RetireTask(ctx context.Context, app, task, by string) error {
	id, by, err := c.operatorTask(ctx, app, task, by)
	if err != nil {
		return err
	}
	if _, err := c.store.RetireTask(ctx, id, by); err != nil {
		return fmt.Errorf("taskling: retire %s/%s: %w", app, task, err)
	}
	return nil
}

// RetireSchedule retires app/task's schedule only: no host claims its instants (a claim planned
// before commits nothing), while the task itself can still be started, by hand or by Backfill.
// A host that registers it again with Schedule does not bring it back: Schedule returns nil and
// its RunScheduler keeps it dormant until an operator unretires it. Recorded like RetireTask;
// the error wraps ErrNotFound when the task has no schedule.
func (c *Client) RetireSchedule(ctx context.Context, app, task, by string) error {
	id, by, err := c.operatorTask(ctx, app, task, by)
	if err != nil {
		return err
	}
	_, found, err := c.store.RetireSchedule(ctx, id, by)
	if err != nil {
		return fmt.Errorf("taskling: retire the schedule of %s/%s: %w", app, task, err)
	}
	if !found {
		return notFound("schedule of task " + app + "/" + task)
	}
	return nil
}

// UnretireTask ends app/task's retirement: its starts are served again, with the enabled
// override it had before, and it is listed again. If it has a schedule, the instants that came
// due while it was retired are recorded as ScheduleEventRetired and not run (its cursor moves to
// now; Backfill can still run them). Recorded like RetireTask; unretiring a task that is not
// retired changes nothing.
func (c *Client) UnretireTask(ctx context.Context, app, task, by string) error {
	return c.unretire(ctx, app, task, by, false)
}

// UnretireSchedule ends the retirement of app/task's schedule: its instants are claimed again
// from now on (those that came due meanwhile are recorded as ScheduleEventRetired, not run).
func (c *Client) UnretireSchedule(ctx context.Context, app, task, by string) error {
	return c.unretire(ctx, app, task, by, true)
}

func (c *Client) unretire(ctx context.Context, app, task, by string, schedule bool) error {
	id, by, err := c.operatorTask(ctx, app, task, by)
	if err != nil {
		return err
	}
	what := "task"
	if schedule {
		what = "schedule"
	}
	for attempt := 0; ; attempt++ {
		req := execution.UnretireRequest{TaskID: id, Schedule: schedule, By: by, Host: c.host}
		row, ok, err := c.store.Schedule(ctx, id)
		if err != nil {
			return err
		}
		if schedule && !ok {
			return notFound("schedule of task " + app + "/" + task)
		}
		if ok {
			if req.Gap, req.Next, err = retiredGap(row, what); err != nil {
				return fmt.Errorf("taskling: stored schedule of %s/%s: %w", app, task, err)
			}
		}
		_, err = c.store.Unretire(ctx, req)
		if execution.IsScheduleConflict(err) && attempt < 5 {
			continue // the cursor moved between the read and the write: read it again
		}
		if err != nil {
			return fmt.Errorf("taskling: unretire the %s of %s/%s: %w", what, app, task, err)
		}
		return nil
	}
}

// retiredGap is the move of a schedule's cursor to the database's now over the instants that
// came due since it: recorded as retired, not run. nil when none came due.
func retiredGap(row execution.ScheduleRow, what string) (*execution.ScheduleClaim, time.Time, error) {
	sched, err := cronspec.Parse(row.Spec, row.TimeZone)
	if err != nil {
		return nil, time.Time{}, err
	}
	var due instantRange
	for t := sched.Next(row.Cursor); !t.IsZero() && !t.After(row.Now) && due.N < maxDueInstants; t = sched.Next(t) {
		due.add(t)
	}
	if due.N == 0 {
		return nil, time.Time{}, nil
	}
	detail := fmt.Sprintf("came due while the %s was retired; not run (Backfill runs them)", what)
	if due.N == maxDueInstants {
		detail = fmt.Sprintf("came due while the %s was retired (the first %d counted); not run", what, maxDueInstants)
	}
	ev := due.event(ScheduleEventRetired, detail)
	return &execution.ScheduleClaim{Expected: row.Cursor, Events: []execution.ScheduleEvent{ev}}, row.Now, nil
}

// operatorTask validates an operator's change of an existing task and names who makes it.
func (c *Client) operatorTask(ctx context.Context, app, task, by string) (int64, string, error) {
	if err := validateOwnTask(app, task); err != nil {
		return 0, "", err
	}
	by, err := c.operator("by", by)
	if err != nil {
		return 0, "", err
	}
	id, ok, err := c.store.FindTask(ctx, app, task)
	if err != nil {
		return 0, "", err
	}
	if !ok {
		return 0, "", notFound("task " + app + "/" + task)
	}
	return id, by, nil
}

// Change is one operator change of a task, as its audit trail records it: who (By), when (the
// change's transaction time on the database clock), which Field ("concurrency_limit",
// "enabled", "death_mode", "keep_alive_interval", "keep_alive_death_threshold",
// "override_threshold", "keep_completed", "keep_failed", "keep_blocked", "retired",
// "schedule_retired", "block #ID" for a forced block, "submission #ID" for a cancelled
// submission), and its Old and New values as text ("3", "unlimited", "30s", "14d", "forever",
// "yes"). A nil value means not overridden: the task inherits what its hosts declare.
type Change struct {
	ID    int64
	At    time.Time
	By    string
	Field string
	Old   *string
	New   *string
}

// ChangeFilter selects a page of a task's changes, newest first. A nil *ChangeFilter means the
// newest DefaultChangesPage.
type ChangeFilter struct {
	// Before keeps the changes older than the change with this id (0: from the newest): pass
	// the previous page's NextBefore.
	Before int64
	// Limit is the page size, 1 to MaxChangesPage; 0 means DefaultChangesPage.
	Limit int
}

// ChangePage is a page of changes, newest first; NextBefore is the next page's Before (0 on the
// last page).
type ChangePage struct {
	Changes    []Change
	NextBefore int64
}

// Page sizes of TaskChanges.
const (
	DefaultChangesPage = 20
	MaxChangesPage     = 500
)

// TaskChanges returns app/task's audit trail, newest first: every operator change of its
// overrides, its retirement and its schedule's, its forced blocks and cancelled submissions,
// each written in the change's own transaction. The error wraps ErrNotFound when the task does
// not exist.
func (c *Client) TaskChanges(ctx context.Context, app, task string, filter *ChangeFilter) (ChangePage, error) {
	if err := validateTask(app, task); err != nil {
		return ChangePage{}, err
	}
	f := ChangeFilter{}
	if filter != nil {
		f = *filter
	}
	switch {
	case f.Limit == 0:
		f.Limit = DefaultChangesPage
	case f.Limit < 1 || f.Limit > MaxChangesPage:
		return ChangePage{}, fmt.Errorf("%w: ChangeFilter.Limit is %d; want 1 to %d", ErrInvalidArgument, f.Limit, MaxChangesPage)
	}
	if f.Before < 0 {
		return ChangePage{}, fmt.Errorf("%w: ChangeFilter.Before is %d; want a change id or 0", ErrInvalidArgument, f.Before)
	}
	id, ok, err := c.store.FindTask(ctx, app, task)
	if err != nil {
		return ChangePage{}, err
	}
	if !ok {
		return ChangePage{}, notFound("task " + app + "/" + task)
	}
	rows, err := c.store.Changes(ctx, id, f.Before, f.Limit+1)
	if err != nil {
		return ChangePage{}, err
	}
	var page ChangePage
	if len(rows) > f.Limit {
		rows = rows[:f.Limit]
		page.NextBefore = rows[len(rows)-1].ID
	}
	page.Changes = make([]Change, len(rows))
	for i, r := range rows {
		page.Changes[i] = Change{ID: r.ID, At: r.At, By: r.By, Field: r.Field, Old: r.Old, New: r.New}
	}
	return page, nil
}

package taskling

import (
	"context"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/cronspec"
)

// Retirement says when, and by whom, a task or its schedule was retired: By is the operator's
// Name (Operator.Name; the principal of a change through `taskling serve`).
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

// RetireTask retires app/task (see Operations.RetireTask), recorded as made by the operator
// named by ("" means "library@" and this client's host name).
//
// Deprecated: use c.As(Operator{Name: by}).RetireTask(ctx, app, task), which records the same.
func (c *Client) RetireTask(ctx context.Context, app, task, by string) error {
	o, err := c.asBy("by", by)
	if err != nil {
		return err
	}
	return o.RetireTask(ctx, app, task)
}

// RetireSchedule retires app/task's schedule only (see Operations.RetireSchedule), recorded like
// RetireTask.
//
// Deprecated: use c.As(Operator{Name: by}).RetireSchedule(ctx, app, task).
func (c *Client) RetireSchedule(ctx context.Context, app, task, by string) error {
	o, err := c.asBy("by", by)
	if err != nil {
		return err
	}
	return o.RetireSchedule(ctx, app, task)
}

// UnretireTask ends app/task's retirement (see Operations.UnretireTask), recorded like
// RetireTask.
//
// Deprecated: use c.As(Operator{Name: by}).UnretireTask(ctx, app, task).
func (c *Client) UnretireTask(ctx context.Context, app, task, by string) error {
	o, err := c.asBy("by", by)
	if err != nil {
		return err
	}
	return o.UnretireTask(ctx, app, task)
}

// UnretireSchedule ends the retirement of app/task's schedule (see
// Operations.UnretireSchedule), recorded like RetireTask.
//
// Deprecated: use c.As(Operator{Name: by}).UnretireSchedule(ctx, app, task).
func (c *Client) UnretireSchedule(ctx context.Context, app, task, by string) error {
	o, err := c.asBy("by", by)
	if err != nil {
		return err
	}
	return o.UnretireSchedule(ctx, app, task)
}

func (o *Operations) unretire(ctx context.Context, app, task string, schedule bool) error {
	c := o.c
	id, op, err := o.task(ctx, app, task, true)
	if err != nil {
		return err
	}
	what := "task"
	if schedule {
		what = "schedule"
	}
	for attempt := 0; ; attempt++ {
		req := execution.UnretireRequest{TaskID: id, Schedule: schedule, Op: op, Host: c.host}
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

// Change is one operator change of a task, as its audit trail records it: who (Principal, the
// Operator's Name, and By, its Note or else its Name), when (the change's transaction time on the
// database clock), which Field ("concurrency_limit",
// "enabled", "death_mode", "keep_alive_interval", "keep_alive_death_threshold",
// "override_threshold", "keep_completed", "keep_failed", "keep_blocked", "retired",
// "schedule_retired", "block #ID" for a forced block, "submission #ID" for a cancelled
// submission), and its Old and New values as text ("3", "unlimited", "30s", "14d", "forever",
// "yes"). A nil value means not overridden: the task inherits what its hosts declare.
type Change struct {
	ID int64
	At time.Time
	By string
	// Principal is "" on the changes recorded before migration 0016, or by older binaries.
	Principal string
	Field     string
	Old       *string
	New       *string
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
		if r.Principal != nil {
			page.Changes[i].Principal = *r.Principal
		}
	}
	return page, nil
}

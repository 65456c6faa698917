package taskling

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/cronspec"
)

// Backfill runs, in the calling goroutine and oldest first, every instant of app/task's
// schedule in [from, to] that the scheduler has already decided (at or before its cursor) and
// that has no execution yet (nor had one that cleanup deleted): instants skipped or expired after an outage, for instance. It
// needs the task registered on this client (Schedule) and never moves the cursor. Each run
// waits for the task's slot. It returns the instants it ran; a run's error stops it.
func (c *Client) Backfill(ctx context.Context, app, task string, from, to time.Time) (_ []time.Time, err error) {
	defer wrapErr(&err, "backfill %s/%s", app, task)
	if err := validateOwnTask(app, task); err != nil {
		return nil, err
	}
	if to.Before(from) {
		return nil, fmt.Errorf("%w: Backfill: to (%s) is before from (%s)", ErrInvalidArgument, to, from)
	}
	c.sched.mu.Lock()
	var r *registration
	for _, reg := range c.sched.regs {
		if reg.app == app && reg.task == task {
			r = reg
		}
	}
	c.sched.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("%w: Backfill: %s/%s is not registered on this client (call Schedule first)", ErrInvalidArgument, app, task)
	}
	row, ok, err := c.scheds.Schedule(ctx, r.taskID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("taskling: the schedule row of %s/%s is gone", app, task)
	}
	sched, err := cronspec.Parse(row.Spec, row.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("taskling: stored schedule of %s/%s: %w", app, task, err)
	}
	if row.Cursor.Before(to) {
		to = row.Cursor
	}
	var instants []time.Time
	for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(to); t = sched.Next(t) {
		if len(instants) == MaxBackfillInstants {
			return nil, fmt.Errorf("%w: Backfill: more than %d instants between %s and %s", ErrInvalidArgument, MaxBackfillInstants, from, to)
		}
		instants = append(instants, t)
	}
	if len(instants) == 0 {
		return nil, nil
	}
	existing, err := c.history.ScheduledExecutions(ctx, r.taskID, instants[0], instants[len(instants)-1])
	if err != nil {
		return nil, err
	}
	// Instants whose executions cleanup deleted were decided too.
	forgotten, err := c.admin.ForgottenInstants(ctx, r.taskID, instants[0], instants[len(instants)-1])
	if err != nil {
		return nil, err
	}
	have := make(map[time.Time]bool, len(existing)+len(forgotten))
	for _, e := range existing {
		have[e.ScheduledFor.UTC()] = true
	}
	for _, at := range forgotten {
		have[at.UTC()] = true
	}
	var ran []time.Time
	for _, t := range instants {
		if have[t.UTC()] {
			continue
		}
		settings, declared, err := c.scheduleSettings(ctx, app, task, r.opts)
		if err != nil {
			return ran, err
		}
		instant := t
		session, err := c.hb.sessionID(ctx)
		if err != nil {
			return ran, err
		}
		req := startReq{AcquireRequest: execution.AcquireRequest{Requester: execution.Requester{TaskID: r.taskID,
			TaskName: app + "/" + task, Host: c.host, SessionID: session, Declared: declared}, ScheduledFor: &instant,
			Key: r.opts.Key, Cost: r.opts.Cost}, options: "ScheduleOptions"}
		_, req.obs = c.observe(ctx, StartInfo{Application: app, Task: task, Kind: StartBackfill, At: time.Now(),
			Key: r.opts.Key, Cost: max(r.opts.Cost, 1), ScheduledFor: instant}, false)
		exec, err := c.claimWhenFree(ctx, app, task, req, settings)
		if execution.IsScheduleConflict(err) {
			continue // claimed meanwhile by another Backfill
		}
		if err != nil {
			return ran, err
		}
		if err := c.runStarted(ctx, exec, func(ctx context.Context, e *Execution) error { return r.fn(ctx, e) }); err != nil {
			return ran, fmt.Errorf("taskling: backfill of %s/%s for %s: %w", app, task, instant.Format(time.RFC3339), err)
		}
		ran = append(ran, instant)
	}
	return ran, nil
}

// claimWhenFree acquires a slot for req's instant, waiting while the slot is held. Unlike a
// WaitForSlot start it records nothing when ctx ends first, so the instant stays backfillable.
func (c *Client) claimWhenFree(ctx context.Context, app, task string, req startReq, settings TaskSettings) (*Execution, error) {
	wake, unsubscribe := c.notifier.Subscribe(req.TaskID) // before the first attempt: no lost wake-up
	defer unsubscribe()
	for {
		cctx, cancel := claimContext(ctx)
		res, err := c.acquire(cctx, app, task, req)
		cancel()
		if err == nil {
			exec := c.newExecution(app, task, req, res, settings, req.obs.begin(ctx))
			exec.scheduledFor = *req.ScheduledFor
			return exec, nil
		}
		if !errors.Is(err, ErrLimitReached) {
			return nil, err
		}
		switch c.wait(ctx, retryDelay(res, c.maxPoll), wake) {
		case waitCancelled:
			return nil, ctx.Err()
		case waitClosed:
			return nil, ErrClientClosed
		}
	}
}

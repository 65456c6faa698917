package taskling

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/backoff"
	"github.com/taskling-go/taskling/internal/cronspec"
	"github.com/taskling-go/taskling/internal/store/schedulestore"
)

// RunScheduler runs the cron loop of every task registered on this client (and of those
// registered while it runs) until ctx ends; then it cancels the runs in progress (their
// context ends), waits for them to return and returns nil. Shutdown instead stops it gracefully:
// it claims nothing more and lets the runs in progress finish until Shutdown's deadline. Every host runs it; none is a
// leader. It returns ErrClientClosed when the client is closed, and an error wrapping
// ErrInvalidArgument if it is already running on this client.
func (c *Client) RunScheduler(ctx context.Context) error {
	s := &c.sched
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return fmt.Errorf("%w: RunScheduler is already running on this client", ErrInvalidArgument)
	}
	s.running = true
	if s.regs == nil {
		s.regs = map[int64]*registration{}
		s.added = make(chan struct{})
	}
	s.mu.Unlock()
	// Runs outlive the loops: ctx ending cancels them at once; Shutdown lets them finish until
	// its deadline (drain.ctx).
	runCtx, cancelRuns := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelRuns(nil)
	defer context.AfterFunc(ctx, func() { cancelRuns(context.Cause(ctx)) })()
	defer context.AfterFunc(c.drain.ctx, func() { cancelRuns(ErrShuttingDown) })()
	// A variable of its own: the AfterFunc above reads ctx from another goroutine.
	loopsCtx, stop := context.WithCancel(ctx)
	var loops, runs sync.WaitGroup
	defer func() {
		stop()
		loops.Wait()
		runs.Wait()
		s.mu.Lock()
		for _, r := range s.regs {
			r.cancel = nil
		}
		s.running = false
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		for _, r := range s.regs {
			if r.cancel == nil {
				lctx, cancel := context.WithCancel(loopsCtx)
				r.cancel = cancel
				loops.Add(1)
				go func() {
					defer loops.Done()
					c.scheduleLoop(lctx, runCtx, r, &runs)
				}()
			}
		}
		added := s.added
		s.mu.Unlock()
		select {
		case <-loopsCtx.Done():
			return nil
		case <-c.drain.stopping:
			return nil // the deferred waits drain the runs
		case <-c.closed:
			return ErrClientClosed
		case <-added:
		}
	}
}

// maxScheduleSleep bounds a loop's sleep, so that a schedule changed by another host is seen.
const maxScheduleSleep = 30 * time.Second

// scheduleLoop decides r's instants until ctx ends. Runs get runCtx (RunScheduler's), so that
// replacing a registration does not cancel a run in progress.
func (c *Client) scheduleLoop(ctx, runCtx context.Context, r *registration, runs *sync.WaitGroup) {
	// Subscribed before the first claim: a slot freed between a denied claim and the wait must
	// wake the loop. (Subscribing after the denial missed such a release, and the loop slept
	// until the holder's death threshold.)
	slotFreed, unsubscribe := c.notifier.Subscribe(r.taskID)
	defer unsubscribe()
	failures := 0
	var warned string
	for ctx.Err() == nil {
		wait, wakeOnSlot, err := c.scheduleStep(ctx, runCtx, r, runs, &warned)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			failures++
			wait = backoff.Delay(failures-1, time.Second, 16*time.Second)
			c.log.Warn("taskling: scheduler step failed; retrying", zap.String("task", r.app+"/"+r.task),
				zap.Int("failures", failures), zap.Duration("retry_in", wait), zap.Error(err))
		default:
			failures = 0
		}
		if wait <= 0 {
			continue
		}
		var wake <-chan struct{}
		if wakeOnSlot {
			wake = slotFreed
		}
		c.wait(ctx, wait, wake)
	}
}

// scheduleStep reads the schedule, plans on the DB clock, and claims, records or waits. It
// returns how long to sleep before the next step (0: at once) and whether a freed slot should
// wake it earlier.
func (c *Client) scheduleStep(ctx, runCtx context.Context, r *registration, runs *sync.WaitGroup, warned *string) (time.Duration, bool, error) {
	row, ok, err := c.scheds.Schedule(ctx, r.taskID)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, false, fmt.Errorf("taskling: the schedule row of %s/%s is gone", r.app, r.task)
	}
	if row.Retired() {
		// Dormant: nothing is decided. Unretiring wakes the loop (the task's notification) and
		// records the instants that came due meanwhile.
		return maxScheduleSleep, true, nil
	}
	if (row.Spec != r.spec || row.TimeZone != r.zone) && *warned != row.Spec+"\x00"+row.TimeZone {
		*warned = row.Spec + "\x00" + row.TimeZone
		c.log.Warn("taskling: another host registered a different spec for this task; the stored one is in force",
			zap.String("task", r.app+"/"+r.task), zap.String("stored_spec", row.Spec), zap.String("stored_zone", row.TimeZone),
			zap.String("local_spec", r.spec), zap.String("local_zone", r.zone))
	}
	sched, err := cronspec.Parse(row.Spec, row.TimeZone)
	if err != nil {
		return 0, false, fmt.Errorf("taskling: stored schedule of %s/%s: %w", r.app, r.task, err)
	}
	plan := planCatchUp(sched, row.Cursor, row.Now, policyOf(row))
	if len(plan.Run) == 0 {
		if !plan.Decided.IsZero() {
			_, err := c.scheds.AdvanceSchedule(ctx, r.taskID, c.host, row.Cursor, plan.Decided, plan.events())
			return 0, false, err
		}
		if plan.Next.IsZero() {
			return maxScheduleSleep, false, nil
		}
		// A few milliseconds late rather than early: an early wake-up just sleeps again.
		return min(plan.Next.Sub(row.Now)+5*time.Millisecond, maxScheduleSleep), false, nil
	}
	return c.claimNext(ctx, runCtx, r, runs, row, plan)
}

// claimNext claims plan's first instant and starts its run, or records why it does not run.
func (c *Client) claimNext(ctx, runCtx context.Context, r *registration, runs *sync.WaitGroup, row schedulestore.ScheduleRow, plan catchUpPlan) (time.Duration, bool, error) {
	instant := plan.Run[0]
	events := plan.events()
	settings, declared, err := c.scheduleSettings(ctx, r.app, r.task, r.opts)
	if err != nil {
		return 0, false, err
	}
	// A catch-up run, or any run under OverlapWait, waits for a held slot (deciding nothing
	// meanwhile); an on-time run under OverlapSkip is recorded as Blocked instead.
	waitForSlot := plan.Late[0] || OverlapPolicy(row.Overlap) == OverlapWait
	session, err := c.hb.sessionID(ctx)
	if err != nil {
		return 0, false, err
	}
	req := startReq{
		AcquireRequest: execution.AcquireRequest{Requester: execution.Requester{TaskID: r.taskID, TaskName: r.app + "/" + r.task,
			Host: c.host, SessionID: session, Declared: declared}, RecordDenial: !waitForSlot, Key: r.opts.Key, Cost: r.opts.Cost},
		claim: &execution.ScheduleClaim{Expected: row.Cursor, Events: events}, instant: instant, options: "ScheduleOptions",
	}
	// Traced once claimed: a claim another host won, or one skipped, is no run.
	_, req.obs = c.observe(ctx, StartInfo{Application: r.app, Task: r.task, Kind: StartScheduled, At: time.Now(),
		Key: r.opts.Key, Cost: max(r.opts.Cost, 1), ScheduledFor: instant}, false)
	if !c.drain.start() { // Shutdown: claim nothing more
		return maxScheduleSleep, false, nil
	}
	started := false
	defer func() {
		if !started {
			c.drain.done()
		}
	}()
	cctx, cancel := claimContext(ctx)
	res, err := c.acquire(cctx, r.app, r.task, req)
	cancel()
	switch {
	case err == nil:
		exec := c.newExecution(r.app, r.task, req, res, settings, req.obs.begin(runCtx))
		exec.scheduledFor = instant
		runs.Add(1)
		started = true
		go func() {
			defer runs.Done()
			defer c.drain.done()
			if err := c.runStarted(runCtx, exec, func(ctx context.Context, e *Execution) error { return r.fn(ctx, e) }); err != nil {
				c.log.Warn("taskling: scheduled run failed", zap.String("task", r.app+"/"+r.task),
					zap.Time("scheduled_for", instant), zap.Int64("execution", exec.ID()), zap.Error(err))
			}
		}()
		return 0, false, nil
	case execution.IsScheduleConflict(err):
		return 0, false, nil // another host decided first (or the schedule was retired): plan again
	case errors.Is(err, ErrTaskRetired):
		return 0, false, nil // retired since the plan: the next step finds it so
	case errors.Is(err, ErrTaskDisabled):
		// Instants that come due while the task is disabled are recorded and not run later.
		disabled := instantRange{}
		for _, t := range plan.Run {
			disabled.add(t)
		}
		events = append(events, disabled.event(ScheduleEventDisabled, "task disabled"))
		_, err := c.scheds.AdvanceSchedule(ctx, r.taskID, c.host, row.Cursor, plan.Run[len(plan.Run)-1], events)
		return 0, false, err
	case (errors.Is(err, ErrLimitReached) || errors.Is(err, ErrRateLimited)) && res.ExecutionID != 0:
		return 0, false, nil // skipped for overlap (or a rate), recorded with the cursor's advance
	case errors.Is(err, ErrRateLimited):
		// OverlapWait: planned again once the rate has room (no release announces it), when the
		// catch-up policy decides which of the instants due run.
		return max(res.RetryAfter+time.Millisecond, time.Millisecond), true, nil
	case errors.Is(err, ErrLimitReached):
		if hook := c.testHooks.claimDenied; hook != nil {
			hook()
		}
		return retryDelay(res, c.maxPoll), true, nil
	default:
		return 0, false, err
	}
}

// claimTimeout bounds a claim transaction.
const claimTimeout = 30 * time.Second

// claimContext is the context of a claim: it keeps ctx's values but not its cancellation, so
// that stopping the scheduler lets a claim in flight finish (a claimed instant then runs with its
// context already cancelled). Interrupting the transaction instead would leave its outcome
// unknown: an instant committed as claimed but never run.
func claimContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
}

func policyOf(row schedulestore.ScheduleRow) catchUpPolicy {
	p := catchUpPolicy{CatchUp: CatchUpPolicy(row.CatchUp), MaxCatchUp: row.MaxCatchUp, Misfire: row.MisfireThreshold}
	if row.CatchUpWindow != nil {
		p.Window = *row.CatchUpWindow
	}
	return p
}

// events are the records of the plan's instants decided without a run.
func (p catchUpPlan) events() []execution.ScheduleEvent {
	var out []execution.ScheduleEvent
	if p.Expired.N > 0 {
		out = append(out, p.Expired.event(ScheduleEventExpired, "older than the catch-up window"))
	}
	if p.Skipped.N > 0 {
		out = append(out, p.Skipped.event(ScheduleEventSkipped, "missed; not run by the catch-up policy"))
	}
	return out
}

func (r instantRange) event(kind ScheduleEventKind, detail string) execution.ScheduleEvent {
	first, last := r.First, r.Last
	return execution.ScheduleEvent{Kind: string(kind), First: &first, Last: &last, Instants: r.N, Detail: detail}
}

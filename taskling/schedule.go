package taskling

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/cronspec"
)

// CatchUpPolicy decides which missed instants run after an outage (DESIGN §9). An instant is
// missed when no host claimed it within the misfire threshold.
type CatchUpPolicy int

const (
	// CatchUpRunLatest (the default): of k missed instants, one run, for the latest.
	CatchUpRunLatest CatchUpPolicy = iota
	// CatchUpRunAll: each missed instant, oldest first, at most MaxCatchUp (the latest ones;
	// older ones are recorded as skipped).
	CatchUpRunAll
	// CatchUpSkip: none; the next run is the next on-time instant.
	CatchUpSkip
)

func (p CatchUpPolicy) String() string {
	switch p {
	case CatchUpRunLatest:
		return "RunLatest"
	case CatchUpRunAll:
		return "RunAll"
	case CatchUpSkip:
		return "Skip"
	}
	return fmt.Sprintf("CatchUpPolicy(%d)", int(p))
}

// OverlapPolicy decides what happens when an instant comes due while the task's previous run
// still holds its slot.
type OverlapPolicy int

const (
	// OverlapSkip (the default): the instant is not run; it is recorded as a Blocked execution
	// with its ScheduledFor set.
	OverlapSkip OverlapPolicy = iota
	// OverlapWait: nothing is decided while the slot is held; when it frees, the instants that
	// came due meanwhile are decided by the catch-up policy exactly as after an outage (RunLatest
	// runs the latest of them, RunAll each one in turn). Not allowed with CatchUpSkip, which
	// would never run a waited-for instant.
	OverlapWait
)

func (p OverlapPolicy) String() string {
	switch p {
	case OverlapSkip:
		return "Skip"
	case OverlapWait:
		return "Wait"
	}
	return fmt.Sprintf("OverlapPolicy(%d)", int(p))
}

// Schedule defaults.
const (
	DefaultMaxCatchUp       = 100
	DefaultMisfireThreshold = 5 * time.Second
	// MaxBackfillInstants bounds one Backfill call.
	MaxBackfillInstants = 10000
)

// ScheduleOptions configure a cron task. A nil *ScheduleOptions or a zero field means the
// default.
type ScheduleOptions struct {
	// TimeZone is the IANA zone the spec's wall-clock times are in (tzdata is embedded, so every
	// host agrees). Default "UTC". "Local" is refused.
	TimeZone string
	// CatchUp is the policy for missed instants. Default CatchUpRunLatest.
	CatchUp CatchUpPolicy
	// CatchUpWindow: a missed instant older than this (on the DB clock) is never run; it is
	// recorded as expired. 0: no window.
	CatchUpWindow time.Duration
	// MaxCatchUp caps the missed instants CatchUpRunAll runs in one catch-up. Default 100.
	MaxCatchUp int
	// Overlap is the policy when an instant comes due while the previous run holds the slot.
	// Default OverlapSkip.
	Overlap OverlapPolicy
	// MisfireThreshold: an instant claimed at most this long after it (DB clock), and no later
	// than half-way to the next instant, is on time; later, it was missed and the catch-up
	// policy decides. Default 5s.
	MisfireThreshold time.Duration
	// Settings of the task's scheduled runs, over Config.Defaults and Config.Settings (operator
	// overrides still win). The default limit of 1 makes the task a singleton.
	Settings TaskSettings
}

// ScheduleFunc is the work of a cron task; exec.ScheduledFor() is the instant it runs for.
type ScheduleFunc func(ctx context.Context, exec *Execution) error

// ScheduledFor is the cron instant a scheduler or Backfill run was claimed for; zero for other
// executions.
func (e *Execution) ScheduledFor() time.Time { return e.scheduledFor }

// scheduler holds a Client's cron registrations.
type scheduler struct {
	mu      sync.Mutex
	regs    map[int64]*registration
	added   chan struct{} // closed and replaced when a registration is added
	running bool
}

type registration struct {
	app, task string
	taskID    int64
	spec      string
	zone      string
	fn        ScheduleFunc
	opts      ScheduleOptions
	cancel    context.CancelFunc // stops its loop (nil while none runs)
}

// Schedule registers app/task to run fn at every instant of the cron spec, exactly once across
// every host running RunScheduler with the same registration. Registration writes the schedule
// row: the first one sets its cursor to now (no backfill); one with a changed spec or zone sets
// the cursor to max(cursor, now), so an edit never triggers catch-up; a re-registration with the
// same spec (a restarted host) keeps the cursor, so the instants missed meanwhile follow the
// catch-up policy. Policies are updated by every registration: the last one wins.
//
// Specs: 5 fields (minute hour day-of-month month day-of-week), 6 with leading seconds,
// descriptors (@daily, @hourly, …) and @every <duration> (whole seconds, anchored to the Unix
// epoch). Errors wrap ErrInvalidArgument and name the spec, field or zone at fault.
func (c *Client) Schedule(ctx context.Context, app, task, spec string, fn ScheduleFunc, opts *ScheduleOptions) error {
	if c.isClosed() {
		return ErrClientClosed
	}
	if err := validateTask(app, task); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: fn is nil", ErrInvalidArgument)
	}
	o := ScheduleOptions{}
	if opts != nil {
		o = *opts
	}
	if err := o.normalize(); err != nil {
		return err
	}
	if _, err := cronspec.Parse(spec, o.TimeZone); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if _, _, err := c.scheduleSettings(ctx, app, task, o); err != nil {
		return err
	}
	id, err := c.taskID(ctx, app, task)
	if err != nil {
		return err
	}
	def := execution.ScheduleDef{TaskID: id, Spec: spec, TimeZone: o.TimeZone, CatchUp: int16(o.CatchUp) + 1,
		MaxCatchUp: o.MaxCatchUp, Overlap: int16(o.Overlap) + 1, MisfireThreshold: o.MisfireThreshold, Host: c.host}
	if o.CatchUpWindow > 0 {
		def.CatchUpWindow = &o.CatchUpWindow
	}
	if _, err := c.store.UpsertSchedule(ctx, def); err != nil {
		return err
	}
	reg := &registration{app: app, task: task, taskID: id, spec: spec, zone: o.TimeZone, fn: fn, opts: o}
	s := &c.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.regs == nil {
		s.regs = map[int64]*registration{}
		s.added = make(chan struct{})
	}
	if old, ok := s.regs[id]; ok && old.cancel != nil {
		old.cancel() // RunScheduler starts a loop for the new registration
	}
	s.regs[id] = reg
	close(s.added)
	s.added = make(chan struct{})
	return nil
}

func (o *ScheduleOptions) normalize() error {
	switch {
	case o.CatchUp < CatchUpRunLatest || o.CatchUp > CatchUpSkip:
		return fmt.Errorf("%w: ScheduleOptions.CatchUp is %d", ErrInvalidArgument, int(o.CatchUp))
	case o.Overlap < OverlapSkip || o.Overlap > OverlapWait:
		return fmt.Errorf("%w: ScheduleOptions.Overlap is %d", ErrInvalidArgument, int(o.Overlap))
	case o.Overlap == OverlapWait && o.CatchUp == CatchUpSkip:
		return fmt.Errorf("%w: ScheduleOptions.Overlap is Wait with CatchUp Skip: a waited-for instant would always be skipped; use RunLatest or RunAll", ErrInvalidArgument)
	case o.CatchUpWindow < 0:
		return fmt.Errorf("%w: ScheduleOptions.CatchUpWindow is negative (%s)", ErrInvalidArgument, o.CatchUpWindow)
	case o.MaxCatchUp < 0:
		return fmt.Errorf("%w: ScheduleOptions.MaxCatchUp is negative (%d)", ErrInvalidArgument, o.MaxCatchUp)
	case o.MisfireThreshold < 0:
		return fmt.Errorf("%w: ScheduleOptions.MisfireThreshold is negative (%s)", ErrInvalidArgument, o.MisfireThreshold)
	}
	if err := o.Settings.validateLayer("ScheduleOptions.Settings"); err != nil {
		return err
	}
	if o.TimeZone == "" {
		o.TimeZone = "UTC"
	}
	if _, err := cronspec.LoadZone(o.TimeZone); err != nil {
		return fmt.Errorf("%w: ScheduleOptions.TimeZone: %w", ErrInvalidArgument, err)
	}
	if o.MaxCatchUp == 0 {
		o.MaxCatchUp = DefaultMaxCatchUp
	}
	if o.MisfireThreshold == 0 {
		o.MisfireThreshold = DefaultMisfireThreshold
	}
	return nil
}

// scheduleSettings are the settings of a registration's runs.
func (c *Client) scheduleSettings(ctx context.Context, app, task string, o ScheduleOptions) (TaskSettings, execution.Settings, error) {
	s, _, err := c.declared(ctx, app, task)
	if err != nil {
		return s, execution.Settings{}, err
	}
	s = s.over(o.Settings)
	es, err := s.toStore("schedule settings of " + app + "/" + task)
	return s, es, err
}

// RunScheduler runs the cron loop of every task registered on this client (and of those
// registered while it runs) until ctx ends; then it cancels the runs in progress (their
// context ends), waits for them to return and returns nil. Every host runs it; none is a
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
	ctx, stop := context.WithCancel(ctx)
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
				lctx, cancel := context.WithCancel(ctx)
				r.cancel = cancel
				loops.Add(1)
				go func() {
					defer loops.Done()
					c.scheduleLoop(lctx, ctx, r, &runs)
				}()
			}
		}
		added := s.added
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
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
	failures := 0
	var warned string
	var slotFreed <-chan struct{} // subscribed on first need
	for ctx.Err() == nil {
		wait, wakeOnSlot, err := c.scheduleStep(ctx, runCtx, r, runs, &warned)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			failures++
			wait = min(time.Second<<min(failures-1, 4), maxScheduleSleep)
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
			if slotFreed == nil {
				ch, unsubscribe := c.notifier.Subscribe(r.taskID)
				slotFreed = ch
				defer unsubscribe()
			}
			wake = slotFreed
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-c.closed:
		case <-timer.C:
		case <-wake:
		}
		timer.Stop()
	}
}

// scheduleStep reads the schedule, plans on the DB clock, and claims, records or waits. It
// returns how long to sleep before the next step (0: at once) and whether a freed slot should
// wake it earlier.
func (c *Client) scheduleStep(ctx, runCtx context.Context, r *registration, runs *sync.WaitGroup, warned *string) (time.Duration, bool, error) {
	row, ok, err := c.store.Schedule(ctx, r.taskID)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, false, fmt.Errorf("taskling: the schedule row of %s/%s is gone", r.app, r.task)
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
	events := plan.events()
	if len(plan.Run) == 0 {
		if !plan.Decided.IsZero() {
			_, err := c.store.AdvanceSchedule(ctx, r.taskID, c.host, row.Cursor, plan.Decided, events)
			return 0, false, err
		}
		if plan.Next.IsZero() {
			return maxScheduleSleep, false, nil
		}
		// A few milliseconds late rather than early: an early wake-up just sleeps again.
		return min(plan.Next.Sub(row.Now)+5*time.Millisecond, maxScheduleSleep), false, nil
	}

	instant := plan.Run[0]
	settings, declared, err := c.scheduleSettings(ctx, r.app, r.task, r.opts)
	if err != nil {
		return 0, false, err
	}
	// A catch-up run, or any run under OverlapWait, waits for a held slot (deciding nothing
	// meanwhile); an on-time run under OverlapSkip is recorded as Blocked instead.
	waitForSlot := plan.Late[0] || row.Overlap == int16(OverlapWait)+1
	req := execution.AcquireRequest{
		TaskID: r.taskID, TaskName: r.app + "/" + r.task, Host: c.host, Declared: declared,
		ScheduledFor: &instant, RecordDenial: !waitForSlot,
		Schedule: &execution.ScheduleClaim{Expected: row.Cursor, Events: events},
	}
	cctx, cancel := claimContext(ctx)
	res, err := c.acquire(cctx, req)
	cancel()
	switch {
	case err == nil:
		exec := c.newExecution(r.app, r.task, req, res, settings, runCtx)
		exec.scheduledFor = instant
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := c.runStarted(runCtx, exec, func(ctx context.Context, e *Execution) error { return r.fn(ctx, e) }); err != nil {
				c.log.Warn("taskling: scheduled run failed", zap.String("task", r.app+"/"+r.task),
					zap.Time("scheduled_for", instant), zap.Int64("execution", exec.ID()), zap.Error(err))
			}
		}()
		return 0, false, nil
	case execution.IsScheduleConflict(err):
		return 0, false, nil // another host decided first: plan again
	case errors.Is(err, ErrTaskDisabled):
		// Instants that come due while the task is disabled are recorded and not run later.
		last := plan.Run[len(plan.Run)-1]
		disabled := instantRange{}
		for _, t := range plan.Run {
			disabled.add(t)
		}
		events = append(events, disabled.event(execution.ScheduleDisabled, "task disabled"))
		_, err := c.store.AdvanceSchedule(ctx, r.taskID, c.host, row.Cursor, last, events)
		return 0, false, err
	case errors.Is(err, ErrLimitReached) && res.ExecutionID != 0:
		return 0, false, nil // skipped for overlap, recorded with the cursor's advance
	case errors.Is(err, ErrLimitReached):
		wait := c.maxPoll
		if res.NextExpiry > 0 {
			wait = min(wait, res.NextExpiry+20*time.Millisecond)
		}
		return wait, true, nil
	default:
		return 0, false, err
	}
}

// claimTimeout bounds a claim transaction.
const claimTimeout = 30 * time.Second

// claimContext is the context of a claim: it keeps ctx's values but not its cancellation, so
// that stopping the scheduler lets a claim in flight finish (a claimed instant then runs with
// its context already cancelled) rather than interrupting its transaction mid-batch, which
// leaks a connection's context-watcher goroutine in pgx v5.7.6 (Pipeline.getResults closes the
// pipeline on a read error without unwatching).
func claimContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
}

func policyOf(row execution.ScheduleRow) catchUpPolicy {
	p := catchUpPolicy{CatchUp: CatchUpPolicy(row.CatchUp - 1), MaxCatchUp: row.MaxCatchUp, Misfire: row.MisfireThreshold}
	if row.CatchUpWindow != nil {
		p.Window = *row.CatchUpWindow
	}
	return p
}

// events are the records of the plan's instants decided without a run.
func (p catchUpPlan) events() []execution.ScheduleEvent {
	var out []execution.ScheduleEvent
	if p.Expired.N > 0 {
		out = append(out, p.Expired.event(execution.ScheduleExpired, "older than the catch-up window"))
	}
	if p.Skipped.N > 0 {
		out = append(out, p.Skipped.event(execution.ScheduleSkipped, "missed; not run by the catch-up policy"))
	}
	return out
}

func (r instantRange) event(kind int16, detail string) execution.ScheduleEvent {
	first, last := r.First, r.Last
	return execution.ScheduleEvent{Kind: kind, First: &first, Last: &last, Instants: r.N, Detail: detail}
}

// Backfill runs, in the calling goroutine and oldest first, every instant of app/task's
// schedule in [from, to] that the scheduler has already decided (at or before its cursor) and
// that has no execution yet: instants skipped or expired after an outage, for instance. It
// needs the task registered on this client (Schedule) and never moves the cursor. Each run
// waits for the task's slot. It returns the instants it ran; a run's error stops it.
func (c *Client) Backfill(ctx context.Context, app, task string, from, to time.Time) ([]time.Time, error) {
	if err := validateTask(app, task); err != nil {
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
	row, ok, err := c.store.Schedule(ctx, r.taskID)
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
	existing, err := c.store.ScheduledExecutions(ctx, r.taskID, instants[0], instants[len(instants)-1])
	if err != nil {
		return nil, err
	}
	have := make(map[time.Time]bool, len(existing))
	for _, e := range existing {
		have[e.ScheduledFor.UTC()] = true
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
		req := execution.AcquireRequest{TaskID: r.taskID, TaskName: app + "/" + task, Host: c.host, Declared: declared, ScheduledFor: &instant}
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
func (c *Client) claimWhenFree(ctx context.Context, app, task string, req execution.AcquireRequest, settings TaskSettings) (*Execution, error) {
	var wake <-chan struct{}
	for {
		cctx, cancel := claimContext(ctx)
		res, err := c.acquire(cctx, req)
		cancel()
		if err == nil {
			exec := c.newExecution(app, task, req, res, settings, ctx)
			exec.scheduledFor = *req.ScheduledFor
			return exec, nil
		}
		if !errors.Is(err, ErrLimitReached) {
			return nil, err
		}
		if wake == nil {
			ch, unsubscribe := c.notifier.Subscribe(req.TaskID)
			defer unsubscribe()
			wake = ch
		}
		wait := c.maxPoll
		if res.NextExpiry > 0 {
			wait = min(wait, res.NextExpiry+20*time.Millisecond)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-c.closed:
			timer.Stop()
			return nil, ErrClientClosed
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// ScheduleEventKind is the kind of a schedule event.
type ScheduleEventKind string

const (
	// ScheduleEventSkipped: missed instants the catch-up policy did not run (or beyond MaxCatchUp).
	ScheduleEventSkipped ScheduleEventKind = "skipped"
	// ScheduleEventExpired: missed instants older than CatchUpWindow.
	ScheduleEventExpired ScheduleEventKind = "expired"
	// ScheduleEventDisabled: instants that came due while the task was disabled.
	ScheduleEventDisabled ScheduleEventKind = "disabled"
	// ScheduleEventRegistered: the first registration (cursor set to now).
	ScheduleEventRegistered ScheduleEventKind = "registered"
	// ScheduleEventChanged: the spec or zone changed (cursor moved to max(cursor, now)).
	ScheduleEventChanged ScheduleEventKind = "changed"
)

// ScheduleEvent records instants a schedule decided not to run, as a range, or a
// registration. Instants skipped for overlap are Blocked executions in LastExecutions, with
// ScheduledFor set.
type ScheduleEvent struct {
	Kind ScheduleEventKind
	// First and Last instant of the range, and how many instants of the spec it holds (zero
	// for registrations).
	First, Last time.Time
	Instants    int64
	Detail      string
	Host        string
	RecordedAt  time.Time
}

// ScheduleHistory returns app/task's last n schedule events, newest first.
func (c *Client) ScheduleHistory(ctx context.Context, app, task string, n int) ([]ScheduleEvent, error) {
	id, ok, err := c.historyOf(ctx, app, task, n)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.store.ScheduleEvents(ctx, id, n)
	if err != nil {
		return nil, err
	}
	kinds := map[int16]ScheduleEventKind{
		execution.ScheduleSkipped: ScheduleEventSkipped, execution.ScheduleExpired: ScheduleEventExpired,
		execution.ScheduleDisabled: ScheduleEventDisabled, execution.ScheduleRegistered: ScheduleEventRegistered,
		execution.ScheduleChanged: ScheduleEventChanged,
	}
	out := make([]ScheduleEvent, len(rows))
	for i, r := range rows {
		e := ScheduleEvent{Kind: kinds[r.Kind], Instants: r.Instants, Host: r.Host, RecordedAt: r.RecordedAt}
		if r.First != nil {
			e.First = *r.First
		}
		if r.Last != nil {
			e.Last = *r.Last
		}
		if r.Detail != nil {
			e.Detail = *r.Detail
		}
		out[i] = e
	}
	return out, nil
}

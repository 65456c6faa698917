package taskling

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/cronspec"
	"github.com/taskling-go/taskling/internal/store/schedulestore"
)

// CatchUpPolicy decides which missed instants run after an outage (README, "Scheduling"). An
// instant is missed when no host claimed it within the misfire threshold.
type CatchUpPolicy int

const (
	// CatchUpRunLatest (the default): of k missed instants, one run, for the latest (none of them
	// when an on-time instant is due too: that one runs).
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
	// MaxCatchUp caps the instants CatchUpRunAll runs in one catch-up, an on-time one among them.
	// Default 100.
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
	// Key and Cost are the scheduled runs' (StartOptions.Key, StartOptions.Cost): an instant
	// refused by its key's limit is handled by its Overlap policy like one refused by the task's.
	Key  string
	Cost int
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
// catch-up policy. Policies are updated by every registration: the last one wins. Registering a
// retired schedule (RetireSchedule, RetireTask) returns nil and leaves it retired: RunScheduler
// keeps it dormant, claiming nothing, until an operator unretires it (a warning is logged).
//
// Specs: 5 fields (minute hour day-of-month month day-of-week), 6 with leading seconds,
// descriptors (@daily, @hourly, …) and @every <duration> (whole seconds, anchored to the Unix
// epoch). Errors wrap ErrInvalidArgument and name the spec, field or zone at fault.
func (c *Client) Schedule(ctx context.Context, app, task, spec string, fn ScheduleFunc, opts *ScheduleOptions) (err error) {
	defer wrapErr(&err, "schedule %s/%s", app, task)
	if c.isClosed() {
		return ErrClientClosed
	}
	if err := validateOwnTask(app, task); err != nil {
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
	def := schedulestore.ScheduleDef{TaskID: id, Spec: spec, TimeZone: o.TimeZone, CatchUp: int(o.CatchUp),
		MaxCatchUp: o.MaxCatchUp, Overlap: int(o.Overlap), MisfireThreshold: o.MisfireThreshold, Host: c.host}
	if o.CatchUpWindow > 0 {
		def.CatchUpWindow = &o.CatchUpWindow
	}
	row, err := c.scheds.UpsertSchedule(ctx, def)
	if err != nil {
		return err
	}
	if row.Retired() {
		c.log.Warn("taskling: this schedule is retired: RunScheduler claims none of its instants until an operator unretires it",
			zap.String("task", app+"/"+task), zap.Bool("task_retired", row.TaskRetired), zap.Bool("schedule_retired", row.ScheduleRetired))
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
	if err := validateKeyCost("ScheduleOptions", o.Key, o.Cost); err != nil {
		return err
	}
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

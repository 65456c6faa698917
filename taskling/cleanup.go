package taskling

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/store/adminstore"
)

// DefaultCleanupInterval is how often at most each task's history is cleaned, fleet-wide.
const DefaultCleanupInterval = 5 * time.Minute

// cleanupHold is how long a cleaner's claim on a task lasts without renewal (each batch renews
// it): a cleaner that dies holds the task this long at most.
const cleanupHold = 2 * time.Minute

// tasksPerRound is how many due tasks a client claims at most per round.
const tasksPerRound = 50

// ParseKeep parses a keep setting as written in a config file or on the command line: "forever"
// (KeepForever), a number of days such as "14d", or a Go duration such as "36h". It must be at
// least MinKeep.
func ParseKeep(s string) (time.Duration, error) {
	if s == "forever" {
		return KeepForever, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n <= 0 || n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("%w: keep setting %q; want \"forever\", days such as \"14d\" or a duration such as \"36h\"", ErrInvalidSettings, s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%w: keep setting %q; want \"forever\", days such as \"14d\" or a duration such as \"36h\"", ErrInvalidSettings, s)
		}
	}
	if d < MinKeep {
		return 0, fmt.Errorf("%w: keep setting %q is less than %s", ErrInvalidSettings, s, MinKeep)
	}
	return d, nil
}

// FormatKeep writes a keep setting as ParseKeep reads it: "forever", whole days as "14d", else a
// Go duration.
func FormatKeep(d time.Duration) string {
	switch {
	case d >= KeepForever-time.Microsecond: // stored in microseconds
		return "forever"
	case d > 0 && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

func retentionOf(r execution.Retention) Retention {
	return Retention{Completed: r.Completed, Failed: r.Failed, Blocked: r.Blocked}
}

// CleanupOptions configure Client.Cleanup. nil means the defaults.
type CleanupOptions struct {
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// Progress, if set, is called after each batch with the task and its counts so far.
	Progress func(app, task string, soFar CleanupCounts)
}

// TaskCleanup is what Cleanup did for one task.
type TaskCleanup struct {
	Application string
	Task        string
	// Keep is the retention applied: operator overrides over what hosts declared (or, if no
	// host declared any, this client's settings for the task).
	Keep   Retention
	Counts CleanupCounts
	// Skipped says why the task was not cleaned ("" when it was): another host was cleaning it.
	Skipped string
}

// Cleanup deletes, now, the history that the retention of app/task lets go — of every task when
// app and task are both "" — in transactions of at most 1 000 executions, and returns what it
// deleted per task. It takes each task's cleanup claim, so that it never runs together with a
// client's automatic cleanup of the same task (that task is then reported as skipped). Never
// deleted: an execution that has not ended, the latest execution and the latest scheduled one of
// each task that is not retired, the execution of a block not completed, attempts of waiting or running submissions,
// the latest blocks of each kind, succeeded idempotent references, and submissions with a
// reference value (only their header is dropped).
func (c *Client) Cleanup(ctx context.Context, app, task string, opts *CleanupOptions) (_ []TaskCleanup, err error) {
	defer wrapErr(&err, "clean up %s/%s", app, task)
	if opts == nil {
		opts = &CleanupOptions{}
	}
	var tasks []adminstore.CleanupTask
	if app == "" && task == "" {
		var err error
		if tasks, err = c.admin.AllTasksForCleanup(ctx); err != nil {
			return nil, err
		}
	} else {
		if err := validateTask(app, task); err != nil {
			return nil, err
		}
		id, ok, err := c.store.FindTask(ctx, app, task)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, notFound("task " + app + "/" + task)
		}
		st, err := c.admin.RetentionOf(ctx, id)
		if err != nil {
			return nil, err
		}
		tasks = []adminstore.CleanupTask{{TaskID: id, Application: app, Task: task, Retention: st}}
	}
	out := make([]TaskCleanup, 0, len(tasks))
	for _, t := range tasks {
		keep, err := c.keepOf(ctx, t)
		if err != nil {
			return out, err
		}
		r := TaskCleanup{Application: t.Application, Task: t.Task, Keep: retentionOf(keep)}
		if opts.DryRun {
			counts, err := c.admin.PlanCleanup(ctx, t.TaskID, keep)
			if err != nil {
				return out, err
			}
			r.Counts = counts
			out = append(out, r)
			continue
		}
		claimant := c.claimant()
		ok, err := c.admin.ClaimCleanup(ctx, t.TaskID, claimant, 0, cleanupHold)
		if err != nil {
			return out, err
		}
		if !ok {
			r.Skipped = "another host is cleaning it"
			out = append(out, r)
			continue
		}
		counts, err := c.cleanTask(ctx, t, keep, claimant, opts.Progress)
		r.Counts = counts
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// keepOf is the retention in force for a task: the operator's overrides over what its hosts
// declared, or over this client's settings for it when no host declared any.
func (c *Client) keepOf(ctx context.Context, t adminstore.CleanupTask) (execution.Retention, error) {
	fallback := c.defaults.retention()
	if t.Retention.Declared == nil {
		s, _, err := c.declared(ctx, t.Application, t.Task)
		if err != nil {
			return execution.Retention{}, err
		}
		fallback = s.retention()
	}
	return t.Retention.Effective(fallback), nil
}

func (s TaskSettings) retention() execution.Retention {
	return execution.Retention{Completed: s.KeepCompleted, Failed: s.KeepFailed, Blocked: s.KeepBlocked}
}

// addCounts adds o to c.
func addCounts(c *CleanupCounts, o CleanupCounts) {
	c.Completed += o.Completed
	c.Failed += o.Failed
	c.Blocked += o.Blocked
	c.Blocks += o.Blocks
	c.Submissions += o.Submissions
	c.Compacted += o.Compacted
	c.Instants += o.Instants
}

// cleanTask deletes a claimed task's history batch by batch and releases the claim.
func (c *Client) cleanTask(ctx context.Context, t adminstore.CleanupTask, keep execution.Retention, claimant string,
	progress func(app, task string, soFar CleanupCounts)) (CleanupCounts, error) {
	cl := &adminstore.Cleaner{Store: c.admin, TaskID: t.TaskID, Keep: keep, Claimant: claimant, Hold: cleanupHold}
	var total CleanupCounts
	var err error
	for {
		var batch CleanupCounts
		var done bool
		batch, done, err = cl.Batch(ctx)
		if err != nil {
			break
		}
		addCounts(&total, batch)
		c.hooks.cleaned(t.Application, t.Task, batch)
		if progress != nil {
			progress(t.Application, t.Task, total)
		}
		if done {
			break
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := c.admin.ReleaseCleanup(rctx, t.TaskID, claimant, total.Rows()); err == nil {
		err = rerr
	}
	// The tally of submissions grows with every change: cleaners compact it too, so that it stays
	// small where nothing scrapes the metrics.
	c.compactTally(rctx)
	if err != nil {
		return total, fmt.Errorf("taskling: cleanup of %s/%s: %w", t.Application, t.Task, err)
	}
	return total, nil
}

// claimant names this client in a cleanup claim: unique per call, so that a claim is released
// only by whoever took it.
func (c *Client) claimant() string {
	return fmt.Sprintf("%s pid %d #%08x", c.host, os.Getpid(), rand.Uint32())
}

// startCleaner starts the automatic cleanup once, with the client's first start: a client that
// only reads (the CLI, a dashboard) never cleans.
func (c *Client) startCleaner() {
	if c.cleanupEvery <= 0 {
		return
	}
	c.cleaner.Do(func() {
		if c.isClosed() {
			return
		}
		c.live.Add(1)
		go c.cleanLoop(c.cleanupEvery)
	})
}

// cleanLoop is the automatic cleanup: every interval (with jitter) it claims the tasks not
// cleaned for an interval, fleet-wide, and cleans them.
func (c *Client) cleanLoop(interval time.Duration) {
	defer c.live.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.closed
		cancel()
	}()
	for {
		// Between half and the whole interval: hosts started together spread out.
		d := interval/2 + rand.N(interval/2+1)
		select {
		case <-c.closed:
			return
		case <-time.After(d):
		}
		if err := c.cleanRound(ctx, interval); err != nil && ctx.Err() == nil {
			c.log.Warn("taskling: automatic cleanup failed; retried next round", zap.Error(err))
		}
	}
}

// cleanRound cleans the tasks due now whose claim this client wins.
func (c *Client) cleanRound(ctx context.Context, interval time.Duration) error {
	due, err := c.admin.DueForCleanup(ctx, interval, tasksPerRound)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range due {
		claimant := c.claimant()
		ok, err := c.admin.ClaimCleanup(ctx, t.TaskID, claimant, interval, cleanupHold)
		if err != nil {
			return err
		}
		if !ok {
			continue // another host claimed it first
		}
		keep, err := c.keepOf(ctx, t)
		if err != nil {
			// A task whose settings this client cannot read is left to the hosts that can.
			_ = c.admin.ReleaseCleanup(ctx, t.TaskID, claimant, 0)
			errs = append(errs, err)
			continue
		}
		if _, err := c.cleanTask(ctx, t, keep, claimant, nil); err != nil {
			if errors.Is(err, adminstore.ErrCleanupClaimLost) {
				continue
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Package bench measures taskling's acquire/release cycle against the floor: the same two
// write-read-write transactions issued raw through pgx on one task row. Used by `make bench`
// (internal/devtools/cmd/bench) and, in a short profile, by `make test`.
package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskling-go/taskling/taskling"
)

// Result is one scenario's measurement.
type Result struct {
	Name       string
	Cycles     int64
	Elapsed    time.Duration
	Latencies  []time.Duration // one per completed cycle
	Retries    int64           // serialization failures retried
	Failed     int64           // acquisitions denied or failed
	Violations int64           // more holders at once than the limit (or units in a window than a rate)
	Statements int64           // statements sent (StatementCounter), when counted
	WALBytes   int64           // WAL written meanwhile (cluster-wide), when measured
	// MaxWindow is, in a rate scenario, the most units granted in a window of the rate's Per.
	MaxWindow int64
}

// Rate is cycles per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Cycles) / r.Elapsed.Seconds()
}

// Percentile returns the p-th percentile (0–100) of the cycle latencies.
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.Latencies)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// Merge adds another run of the same scenario (another process) measured over the same window.
func (r *Result) Merge(o Result) {
	r.Cycles += o.Cycles
	r.Latencies = append(r.Latencies, o.Latencies...)
	r.Retries += o.Retries
	r.Failed += o.Failed
	r.Violations += o.Violations
	r.MaxWindow = max(r.MaxWindow, o.MaxWindow)
	r.Statements += o.Statements
	r.Elapsed = max(r.Elapsed, o.Elapsed)
}

// loop runs cycle in each of n goroutines until d has passed, timing each cycle.
func loop(ctx context.Context, n int, d time.Duration, cycle func(ctx context.Context, g int) error) (Result, error) {
	var (
		mu     sync.Mutex
		res    Result
		cycles atomic.Int64
		wg     sync.WaitGroup
		errs   = make(chan error, n)
	)
	start := time.Now()
	deadline := start.Add(d)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				if err := cycle(ctx, g); err != nil {
					errs <- err
					return
				}
				lat = append(lat, time.Since(t0))
				cycles.Add(1)
			}
			mu.Lock()
			res.Latencies = append(res.Latencies, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Cycles = cycles.Load()
	close(errs)
	for err := range errs {
		return res, err
	}
	return res, nil
}

// Taskling runs StartExecution + Complete cycles: goroutines spread over tasks tasks, each task's
// limit equal to the goroutines using it, so no acquisition should be denied. It counts
// violations: more holders of a task at once than its limit.
func Taskling(ctx context.Context, client *taskling.Client, app string, goroutines, tasks int, d time.Duration) (Result, error) {
	if tasks < 1 || goroutines < tasks {
		return Result{}, fmt.Errorf("bench: want 1 ≤ tasks ≤ goroutines, got %d tasks for %d goroutines", tasks, goroutines)
	}
	perTask := goroutines / tasks
	inside := make([]atomic.Int64, tasks)
	var failed, violations atomic.Int64
	retriesBefore := client.Stats().Retries
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, g int) error {
		t := g % tasks
		exec, err := client.StartExecution(ctx, app, fmt.Sprintf("task-%d", t), nil)
		if errors.Is(err, taskling.ErrLimitReached) {
			failed.Add(1)
			return nil
		}
		if err != nil {
			return err
		}
		if inside[t].Add(1) > int64(perTask) {
			violations.Add(1)
		}
		inside[t].Add(-1)
		return exec.Complete(ctx)
	})
	res.Retries = client.Stats().Retries - retriesBefore
	res.Failed, res.Violations = failed.Load(), violations.Load()
	return res, err
}

// Waiting runs StartExecution(WaitForSlot) + Complete cycles of goroutines on one task whose
// limit (declared by client, below goroutines) makes most of them wait. Unlike the other
// scenarios its safety check can fail: afterwards it computes, from the database's grant and end
// times of every execution, the most holders there ever were at once, and counts the instants
// over the limit as violations.
func Waiting(ctx context.Context, client *taskling.Client, app string, goroutines, limit int, d time.Duration) (Result, error) {
	res, err := waitingCycles(ctx, client, app, "waiting", goroutines, d)
	if err != nil {
		return res, err
	}
	res.Violations, err = overLimit(ctx, client, app, "waiting", limit)
	return res, err
}

// waitingCycles runs waitCycle in goroutines on app/task for d, counting the retries and the
// starts not granted.
func waitingCycles(ctx context.Context, client *taskling.Client, app, task string, goroutines int, d time.Duration) (Result, error) {
	retriesBefore := client.Stats().Retries
	var failed atomic.Int64
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, _ int) error {
		return waitCycle(ctx, client, app, task, &taskling.StartOptions{WaitForSlot: true}, &failed)
	})
	res.Retries = client.Stats().Retries - retriesBefore
	res.Failed = failed.Load()
	return res, err
}

// acquireTimes are the latencies of granted starts, from many goroutines.
type acquireTimes struct {
	mu sync.Mutex
	d  []time.Duration
}

// cycle starts an execution with start and, if it was granted, records how long the start took
// and completes it. A start refused (refused(err)) returns nil.
func (a *acquireTimes) cycle(ctx context.Context, start func() (*taskling.Execution, error), refused func(error) bool) error {
	t0 := time.Now()
	exec, err := start()
	if err != nil && refused(err) {
		return nil
	}
	if err != nil {
		return err
	}
	lat := time.Since(t0)
	a.mu.Lock()
	a.d = append(a.d, lat)
	a.mu.Unlock()
	return exec.Complete(ctx)
}

// waitCycle starts an execution of app/task with opts, waiting at most 10 s, and completes it; a
// start refused (or not granted in time) adds to failed.
func waitCycle(ctx context.Context, client *taskling.Client, app, task string, opts *taskling.StartOptions, failed *atomic.Int64) error {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	exec, err := client.StartExecution(wctx, app, task, opts)
	if errors.Is(err, taskling.ErrLimitReached) {
		failed.Add(1)
		return nil
	}
	if err != nil {
		return err
	}
	return exec.Complete(ctx)
}

// overLimit sweeps the task's executions in database time (grants at their start, releases and
// reclaims at their end; a token transaction's times fall inside its lock on the task row, so a
// slot handed over ends before the next grant of it starts) and counts the grants that made the
// holders exceed limit.
func overLimit(ctx context.Context, client *taskling.Client, app, task string, limit int) (int64, error) {
	return overLimits(ctx, client, app, task, limit, 0)
}

// overLimits is overLimit by cost, counting too the grants that took their key's cost in use
// over keyLimit (0: no key limit).
func overLimits(ctx context.Context, client *taskling.Client, app, task string, limit, keyLimit int) (int64, error) {
	type edge struct {
		at    time.Time
		delta int
		key   string
	}
	var edges []edge
	err := eachGrant(ctx, client, app, task, func(e taskling.ExecutionInfo) {
		cost := max(1, e.Cost)
		edges = append(edges, edge{e.StartedAt, +cost, e.Key})
		switch {
		case !e.ReclaimedAt.IsZero():
			edges = append(edges, edge{e.ReclaimedAt, -cost, e.Key})
		case !e.CompletedAt.IsZero():
			edges = append(edges, edge{e.CompletedAt, -cost, e.Key})
		}
	})
	if err != nil {
		return 0, err
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // at the same instant, ends first
	})
	inUse, perKey, over := 0, map[string]int{}, int64(0)
	for _, e := range edges {
		inUse += e.delta
		perKey[e.key] += e.delta
		if e.delta > 0 && (inUse > limit || keyLimit > 0 && perKey[e.key] > keyLimit) {
			over++
		}
	}
	return over, nil
}

// eachGrant calls f with each execution of app/task that was granted a slot (not blocked).
func eachGrant(ctx context.Context, client *taskling.Client, app, task string, f func(taskling.ExecutionInfo)) error {
	for before := int64(0); ; {
		page, err := client.Executions(ctx, app, task, &taskling.ExecutionFilter{Limit: taskling.MaxExecutionsPage, Before: before})
		if err != nil {
			return err
		}
		for _, e := range page.Executions {
			if e.Status != taskling.StatusBlocked {
				f(e)
			}
		}
		if before = page.NextBefore; before == 0 {
			return nil
		}
	}
}

// Settings are the task settings the Taskling scenario's clients must use: a limit that admits
// every goroutine of a task.
func Settings(goroutines, tasks int) taskling.TaskSettings {
	return taskling.TaskSettings{ConcurrencyLimit: max(1, goroutines/tasks)}
}

// isSerializationFailure reports a serialization failure (40001) or deadlock (40P01): the raw
// loop retries those, as taskling does.
func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

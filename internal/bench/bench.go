// Package bench measures taskling's acquire/release cycle against the floor: the same two
// write-read-write transactions issued raw through pgx on one task row. Used by `make bench`
// (internal/cmd/bench) and, in a short profile, by `make test`.
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	Violations int64           // more holders at once than the limit
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

// Raw runs the floor: per cycle, an acquire and a release transaction, each BEGIN; UPDATE (take
// the row lock); SELECT (read the tokens); UPDATE (write them); COMMIT, statement by statement,
// with serialization failures retried. No local queueing: every goroutine contends on the row.
func Raw(ctx context.Context, pool *pgxpool.Pool, iso pgx.TxIsoLevel, goroutines int, d time.Duration) (Result, error) {
	var taskID int64
	if err := pool.QueryRow(ctx, `INSERT INTO taskling.task_definition (application_name, task_name)
VALUES ('bench', 'raw-' || gen_random_uuid()) RETURNING id`).Scan(&taskID); err != nil {
		return Result{}, err
	}
	var retries atomic.Int64
	txn := func(ctx context.Context) error {
		for {
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE taskling.task_definition SET hold_lock_execution_id = 1 WHERE id = $1`, taskID); err != nil {
					return err
				}
				var tokens string
				var fence int64
				if err := tx.QueryRow(ctx, `SELECT tokens, fence FROM taskling.task_definition WHERE id = $1`, taskID).Scan(&tokens, &fence); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE taskling.task_definition SET tokens = $2, fence = $3 WHERE id = $1`, taskID, tokens, fence+1)
				return err
			})
			if err == nil || !isSerializationFailure(err) {
				return err
			}
			retries.Add(1)
		}
	}
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, _ int) error {
		if err := txn(ctx); err != nil {
			return err
		}
		return txn(ctx)
	})
	res.Retries = retries.Load()
	return res, err
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

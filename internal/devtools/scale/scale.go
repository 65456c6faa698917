package scale

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/taskling"
)

// Options size and pace a run.
type Options struct {
	Seed SeedOptions
	// Reads: LastExecutions calls (each of N executions of a random task), and calls of each
	// tasks page path.
	LastCalls, LastN, APICalls int
	// Acquire: goroutines per task over AcquireTasks tasks, measured for Baseline before the
	// cleanup starts and for as long as it runs.
	AcquireTasks, PerTask int
	Baseline              time.Duration
	// PauseEvery, Pause: the cleanup is paused for Pause between two batches once every
	// PauseEvery of running, so that latencies with and without it alternate within one run
	// (load from elsewhere on the machine then weighs on both alike). PauseEvery 0: no pauses.
	PauseEvery, Pause time.Duration
	// ReadsAfter also measures the reads after the cleanup.
	ReadsAfter bool
	// Submissions are seeded after the cleanup (0: none, and no scrape is measured); Scrapes
	// Prometheus scrapes are then timed.
	Submissions, Scrapes int
}

// APIPaths are the tasks page requests measured: the default sort, busiest first, a search.
var APIPaths = []string{"/api/v1/tasks?limit=50", "/api/v1/tasks?sort=busy&limit=50", "/api/v1/tasks?q=task-00&limit=50"}

// Reads are the read latencies at one moment.
type Reads struct {
	Executions int64 // executions in the database then
	Last       Latencies
	API        []Latencies // by APIPaths
}

// Report is everything a run measured.
type Report struct {
	Options  Options
	Seeded   Seeded
	Holders  int // executions held (live) on tasks throughout, for the busy sort
	Before   Reads
	After    *Reads
	Expected Expected

	// Acquire latencies: before the cleanup, in its pauses, while it runs.
	AcquireBefore, AcquirePaused, AcquireDuring Latencies
	BaselineTook                                time.Duration // Options.Baseline, or longer (minBaseline)
	Denied                                      int64         // acquisitions refused (none expected: limit = goroutines per task)
	Straddled                                   int64         // cycles during which the phase changed (not counted)
	Cleanup                                     taskling.CleanupCounts
	CleanupWall                                 time.Duration // from the call to its return, pauses included
	Paused                                      time.Duration // spent in pauses
	Pauses                                      int
	Batches                                     int // Progress calls
	Skipped                                     int // tasks the cleanup skipped (claimed by another host: none expected)
	Check                                       Check
	TableBytes                                  [2]int64 // task_execution with its indexes and events, before and after
	// Autovacuum runs of those tables once the run ended (the dead rows of the cleanup start them
	// while it runs, and they weigh on what runs then), and the dead rows they still hold.
	Autovacuums, DeadRows int64
	// Scrape is the metrics' scrape with the submissions seeded (nil without).
	Scrape *Scrape
}

// CleanupActive is the cleanup's running time (pauses excluded).
func (r *Report) CleanupActive() time.Duration { return r.CleanupWall - r.Paused }

// RowsPerSecond is the cleanup's rate over its running time.
func (r *Report) RowsPerSecond() float64 {
	if r.CleanupActive() <= 0 {
		return 0
	}
	return float64(r.Cleanup.Rows()) / r.CleanupActive().Seconds()
}

// Without are the acquire latencies while no cleanup batch ran: before it and in its pauses.
func (r *Report) Without() Latencies {
	return append(append(Latencies{}, r.AcquireBefore...), r.AcquirePaused...)
}

// Ratio is the acquire p99 while the cleanup runs over its p99 without.
func (r *Report) Ratio() float64 {
	without := r.Without().Percentile(99)
	if without <= 0 {
		return 0
	}
	return float64(r.AcquireDuring.Percentile(99)) / float64(without)
}

// env is the clients of a run, each on its own pool (as separate hosts would be).
type env struct {
	fleet, acquire, cleaner *taskling.Client
	fleetPool               *pgxpool.Pool
	closers                 []func()
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func (e *env) client(ctx context.Context, dbURL, host string, conns int32, limit int) (*taskling.Client, *pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	e.closers = append(e.closers, pool.Close)
	c, err := taskling.NewClient(pool, &taskling.Config{HostName: host, CleanupInterval: -1,
		Defaults: taskling.TaskSettings{ConcurrencyLimit: limit}})
	if err != nil {
		return nil, nil, err
	}
	e.closers = append(e.closers, c.Close)
	return c, pool, nil
}

func newEnv(ctx context.Context, dbURL string, o Options) (*env, error) {
	e := &env{}
	var err error
	if e.fleet, e.fleetPool, err = e.client(ctx, dbURL, "scale-fleet", 8, 1); err != nil {
		e.close()
		return nil, err
	}
	if e.acquire, _, err = e.client(ctx, dbURL, "scale-acquire", int32(o.AcquireTasks*o.PerTask+4), o.PerTask); err != nil {
		e.close()
		return nil, err
	}
	if e.cleaner, _, err = e.client(ctx, dbURL, "scale-cleaner", 4, 1); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// Run seeds the database at dbURL (migrated, without tasks), measures and verifies; logf
// reports progress. A Report with a failed Check is returned without error: the caller decides.
func Run(ctx context.Context, dbURL string, o Options, logf func(format string, args ...any)) (*Report, error) {
	r := &Report{Options: o}
	e, err := newEnv(ctx, dbURL, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if r.Seeded, err = Seed(ctx, e.fleetPool, o.Seed, func(s string) { logf("%s", s) }); err != nil {
		return nil, err
	}
	logf("seeded in %s (+ VACUUM ANALYZE %s)", r.Seeded.Insert.Round(time.Millisecond), r.Seeded.Vacuum.Round(time.Millisecond))
	holders, err := hold(ctx, e.fleet, o.Seed.Tasks)
	defer func() {
		for _, h := range holders {
			_ = h.Complete(context.WithoutCancel(ctx))
		}
	}()
	if err != nil {
		return nil, err
	}
	r.Holders = len(holders)
	srv := httptest.NewServer(mustHandler(e.fleet))
	defer srv.Close()
	if r.Before, err = reads(ctx, e.fleet, e.fleetPool, srv, o); err != nil {
		return nil, err
	}
	logf("reads measured; computing what the cleanup must delete")
	if r.Expected, err = Expect(ctx, e.fleetPool, int64(o.Seed.Executions)); err != nil {
		return nil, err
	}
	if r.TableBytes[0], err = tableBytes(ctx, e.fleetPool); err != nil {
		return nil, err
	}
	if err := r.acquireAndClean(ctx, e, logf); err != nil {
		return nil, err
	}
	if r.Check, err = Verify(ctx, e.fleetPool, r.Expected, r.Cleanup); err != nil {
		return nil, err
	}
	if r.TableBytes[1], err = tableBytes(ctx, e.fleetPool); err != nil {
		return nil, err
	}
	if o.ReadsAfter {
		after, err := reads(ctx, e.fleet, e.fleetPool, srv, o)
		if err != nil {
			return nil, err
		}
		r.After = &after
	}
	if o.Submissions > 0 {
		logf("seeding %d submissions, then timing %d scrapes of the metrics", o.Submissions, o.Scrapes)
		if r.Scrape, err = measureScrape(ctx, e.fleet, e.fleetPool, o); err != nil {
			return nil, err
		}
	}
	err = e.fleetPool.QueryRow(ctx, `SELECT sum(autovacuum_count), sum(n_dead_tup) FROM pg_stat_user_tables
WHERE schemaname = 'taskling' AND relname IN ('task_execution', 'execution_end', 'task_execution_event')`).Scan(&r.Autovacuums, &r.DeadRows)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func mustHandler(c *taskling.Client) http.Handler {
	h, err := dashboard.NewHandler(c, nil) // as `taskling serve` builds it: read-only without a token
	if err != nil {
		panic(err)
	}
	return h
}

// hold starts, and keeps, an execution of every task numbered 3 mod 20 (busy tasks for the
// tasks page's busy sort; live holders, which the cleanup must not delete).
func hold(ctx context.Context, c *taskling.Client, tasks int) ([]*taskling.Execution, error) {
	var out []*taskling.Execution
	for n := 3; n < tasks; n += 20 {
		exec, err := c.StartExecution(ctx, AppName(n), TaskName(n, tasks), nil)
		if err != nil {
			return out, fmt.Errorf("scale: hold a slot of task %d: %w", n, err)
		}
		out = append(out, exec)
	}
	return out, nil
}

func reads(ctx context.Context, c *taskling.Client, pool *pgxpool.Pool, srv *httptest.Server, o Options) (Reads, error) {
	var rd Reads
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM taskling.task_execution`).Scan(&rd.Executions); err != nil {
		return rd, err
	}
	var err error
	if rd.Last, err = lastExecutions(ctx, c, o.Seed.Tasks, o.LastCalls, o.LastN); err != nil {
		return rd, fmt.Errorf("scale: LastExecutions: %w", err)
	}
	hc := srv.Client()
	for _, p := range APIPaths {
		l, err := apiGet(ctx, hc, srv.URL, p, o.APICalls)
		if err != nil {
			return rd, fmt.Errorf("scale: %w", err)
		}
		rd.API = append(rd.API, l)
	}
	return rd, nil
}

func tableBytes(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('taskling.task_execution') + pg_total_relation_size('taskling.execution_end')
    + pg_total_relation_size('taskling.task_execution_event')`).Scan(&n)
	return n, err
}

// acquireTasks are the seeded tasks the acquire measurement uses: the busiest that hold no
// slot and are not quiet.
func acquireTasks(k int) []int {
	var out []int
	for n := 0; len(out) < k; n++ {
		if n%20 != 3 && n%20 != 10 && n%20 != 15 {
			out = append(out, n)
		}
	}
	return out
}

// warmUp is how long acquisitions run before the baseline counts them; minBaseline the cycles
// the baseline wants.
const (
	warmUp      = 500 * time.Millisecond
	minBaseline = 200
)

// acquireAndClean measures acquisitions for the baseline, then during a cleanup of every task.
func (r *Report) acquireAndClean(ctx context.Context, e *env, logf func(format string, args ...any)) error {
	o := r.Options
	a := &acquirer{client: e.acquire, tasks: acquireTasks(o.AcquireTasks), ntasks: o.Seed.Tasks, perTask: o.PerTask}
	a.setPhase(phaseOff)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.run(ctx, stop) }()
	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case err := <-done:
			return fmt.Errorf("scale: acquire: %w", err)
		}
	}
	logf("acquiring for %s without cleanup", o.Baseline)
	if err := wait(warmUp); err != nil {
		return err
	}
	began := time.Now()
	a.setPhase(phaseIdle)
	if err := wait(o.Baseline); err != nil {
		return err
	}
	// A stall (I/O from elsewhere on the machine, say) may leave the baseline with few cycles:
	// it is then extended, up to three times its length.
	for extra := time.Duration(0); a.counted[phaseIdle].Load() < minBaseline && extra < 2*o.Baseline; extra += time.Second {
		if err := wait(time.Second); err != nil {
			return err
		}
	}
	r.BaselineTook = time.Since(began)
	p := &pacer{a: a, every: o.PauseEvery, pause: o.Pause}
	logf("cleaning every task while acquiring")
	began = time.Now()
	p.start()
	res, err := e.cleaner.Cleanup(ctx, "", "", &taskling.CleanupOptions{
		Progress: func(string, string, taskling.CleanupCounts) { p.afterBatch() }})
	r.CleanupWall = time.Since(began)
	a.setPhase(phaseOff)
	close(stop)
	aerr := <-done
	if err != nil {
		return fmt.Errorf("scale: cleanup: %w", err)
	}
	if aerr != nil {
		return fmt.Errorf("scale: acquire: %w", aerr)
	}
	for _, t := range res {
		r.Cleanup.Completed += t.Counts.Completed
		r.Cleanup.Failed += t.Counts.Failed
		r.Cleanup.Blocked += t.Counts.Blocked
		r.Cleanup.Blocks += t.Counts.Blocks
		r.Cleanup.Submissions += t.Counts.Submissions
		r.Cleanup.Compacted += t.Counts.Compacted
		r.Cleanup.Instants += t.Counts.Instants
		if t.Skipped != "" {
			r.Skipped++
		}
	}
	r.AcquireBefore, r.AcquirePaused, r.AcquireDuring = a.lat[phaseIdle], a.lat[phasePaused], a.lat[phaseCleanup]
	r.Denied, r.Straddled = a.denied.Load(), a.straddled.Load()
	r.Paused, r.Pauses, r.Batches = p.paused, p.windows, p.calls
	if len(r.AcquireDuring) == 0 {
		return errors.New("scale: no acquisition completed while the cleanup ran")
	}
	return nil
}

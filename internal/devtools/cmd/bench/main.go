// Command bench measures taskling against the floor and the targets of the README's Benchmark.
// Every scenario runs -runs times, interleaved (each run goes through every scenario, and the
// order of the two isolation levels alternates between runs), and the table shows the median
// rate: absolute numbers vary 2–3× between runs on this kind of machine, ratios within a run much
// less. `make bench` runs it against the private cluster or TASKLING_DATABASE_URL.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

type options struct {
	duration, heartbeatDuration time.Duration
	runs                        int
	heartbeatProcs, holders     int
	keyHolders                  int
	rateDuration                time.Duration
	cpuProfile                  string
	only                        string
	flow                        flowOptions
	blocks                      time.Duration
	blockRounds                 int
	pgbouncer                   time.Duration
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "measuring time per scenario and run")
	flag.IntVar(&o.runs, "runs", 5, "interleaved runs of every scenario (medians are reported)")
	flag.DurationVar(&o.heartbeatDuration, "heartbeat-duration", 30*time.Second, "measuring time of the heartbeat scenario (0 skips it)")
	flag.IntVar(&o.heartbeatProcs, "heartbeat-processes", 4, "processes of the heartbeat scenario")
	flag.IntVar(&o.holders, "holders", 8000, "executions held in the heartbeat scenario, over all its processes")
	flag.DurationVar(&o.flow.window, "flow-window", 10*time.Second, "window of the slot utilization scenario (0 skips the waiting and submission scenarios)")
	flag.IntVar(&o.flow.submissions, "submissions", 10000, "submissions drained in the submission scenario")
	flag.IntVar(&o.flow.handovers, "handovers", 200, "grants per process in the handover scenario")
	flag.DurationVar(&o.blocks, "blocks-duration", 5*time.Second, "measuring time of each block scenario window (0 skips them)")
	flag.IntVar(&o.blockRounds, "blocks-rounds", 4, "windows of each block scenario and mode, alternating (taskling, raw, raw, taskling, …: an even number cancels a steady drift)")
	flag.Func("blocks-per", "blocks per execution of the block scenarios, comma-separated (default 10,50)", func(v string) error {
		blocksPer = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("blocks per execution %q: want a positive integer", f)
			}
			if slices.Contains(blocksPer, n) {
				return fmt.Errorf("blocks per execution %d given twice", n)
			}
			blocksPer = append(blocksPer, n)
		}
		return nil
	})
	flag.DurationVar(&o.pgbouncer, "pgbouncer-duration", 3*time.Second, "measuring time of each PgBouncer cycles scenario and run (0 skips the PgBouncer scenarios; skipped without pgbouncer)")
	flag.IntVar(&o.keyHolders, "key-holders", 1984, "executions held over 100 keys, or a key each, in the active-keys scenarios (9984: 10 000 keys active at once; each acquire then rewrites a task row of ~850 kB, minutes per round)")
	flag.DurationVar(&o.rateDuration, "rate-duration", 30*time.Second, "measuring time of the rate scenario whose goroutines wait for the rate (issue 27: 30 s; 0 skips it)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write the bench process's CPU profile (its clients, not PostgreSQL) to this file")
	flag.StringVar(&o.only, "only", "", "run only the scenarios whose configuration contains this (the report then misses the others)")
	var c childFlags
	c.register()
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	if c.mode != "" {
		if err := c.run(ctx); err != nil {
			log.Fatalf("bench child: %v", err)
		}
		return
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			log.Fatalf("bench: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatalf("bench: %v", err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, o); err != nil {
		pprof.StopCPUProfile()
		log.Fatalf("bench: %v", err)
	}
}

func run(ctx context.Context, o options) error {
	serverURL, err := pgcluster.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("taskling bench: %d interleaved runs of %s per scenario, PostgreSQL at %s\n\n", o.runs, o.duration, redact(serverURL))
	env := &environment{serverURL: serverURL, d: o.duration, keyHolders: o.keyHolders, rateD: o.rateDuration}
	results := map[string][]bench.Result{}
	scenarios := allScenarios()
	if o.only != "" {
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool { return !strings.Contains(s.kind, o.only) })
	}
	if o.rateDuration <= 0 {
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool { return s.kind == rateWaits })
	}
	for r := range o.runs {
		fmt.Printf("run %d/%d\n", r+1, o.runs)
		for _, sc := range ordered(scenarios, r) {
			res, err := env.measure(ctx, sc)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			results[sc.name] = append(results[sc.name], res)
			fmt.Printf("  %-50s %8.0f cycles/s\n", sc.name, res.Rate())
		}
	}
	var hb *heartbeatResult
	if o.heartbeatDuration > 0 {
		if hb, err = env.heartbeats(ctx, o); err != nil {
			return fmt.Errorf("heartbeats: %w", err)
		}
	}
	var flow *flowResult
	if o.flow.window > 0 {
		if flow, err = env.flow(ctx, o.flow); err != nil {
			return fmt.Errorf("flow: %w", err)
		}
	}
	var blocks *blocksResult
	if o.blocks > 0 {
		if blocks, err = env.blocks(ctx, o.blocks, max(1, o.blockRounds)); err != nil {
			return fmt.Errorf("blocks: %w", err)
		}
	}
	var bouncer *bouncerResult
	if o.pgbouncer > 0 {
		if bouncer, err = env.pgbouncer(ctx, o.pgbouncer, o.runs, o.flow.handovers); err != nil {
			return fmt.Errorf("pgbouncer: %w", err)
		}
	}
	if len(scenarios) > 0 || hb != nil { // -only may leave none
		fmt.Println()
		report(scenarios, results, hb, o)
	}
	if flow != nil {
		fmt.Println()
		flow.print()
	}
	if blocks != nil {
		fmt.Println()
		blocks.print()
	}
	if bouncer != nil {
		fmt.Println()
		bouncer.print()
	}
	return nil
}

// environment creates a fresh database per scenario run, so that table growth from one does not
// slow the next.
type environment struct {
	serverURL  string
	d          time.Duration
	keyHolders int
	rateD      time.Duration // of the rate scenario whose goroutines wait
}

// fresh returns a pool on a new database whose statements counter counts, with at most maxConns
// connections (0: pgxpool's default), and a function that drops it.
func (e *environment) fresh(ctx context.Context, maxConns int32, counter *bench.StatementCounter) (*pgxpool.Pool, func(), error) {
	db, err := pgtest.CreateDatabase(ctx, e.serverURL, true)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if counter != nil {
		cfg.ConnConfig.Tracer = counter
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return pool, func() { pool.Close(); _ = db.Drop(context.Background()) }, nil
}

// measure runs one scenario once on a fresh database.
func (e *environment) measure(ctx context.Context, sc scenario) (bench.Result, error) {
	counter := &bench.StatementCounter{}
	pool, done, err := e.fresh(ctx, sc.maxConns, counter)
	if err != nil {
		return bench.Result{}, err
	}
	defer done()
	return bench.Measured(ctx, pool, counter, func() (bench.Result, error) { return sc.run(ctx, e, pool) })
}

func redact(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

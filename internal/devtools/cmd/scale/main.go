// Command scale is issue 13's benchmark at scale: in a fresh database it seeds 1 M executions over
// 1 000 tasks (generate_series), measures LastExecutions and the tasks page API, then the acquire
// latency without and while a cleanup of every task deletes the history past retention, and
// checks that the cleanup deleted exactly that; then it seeds 1 M submissions and times 20
// Prometheus scrapes of the metrics (issue 28). Timing targets print PASS or MISS; the exit
// status is non-zero only when the cleanup deleted something it must keep, or nothing at all,
// or the run failed. `make scale` runs it against the private cluster or TASKLING_DATABASE_URL.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/scale"
)

func main() {
	var o scale.Options
	flag.IntVar(&o.Seed.Tasks, "tasks", 1000, "tasks seeded")
	flag.IntVar(&o.Seed.Executions, "executions", 1_000_000, "executions seeded")
	flag.IntVar(&o.Seed.Days, "days", 60, "executions start over this many days back (at least 45)")
	flag.IntVar(&o.LastCalls, "last-calls", 2000, "LastExecutions calls measured")
	flag.IntVar(&o.LastN, "last-n", 20, "executions per LastExecutions call")
	flag.IntVar(&o.APICalls, "api-calls", 300, "calls measured per tasks page path")
	flag.IntVar(&o.AcquireTasks, "acquire-tasks", 2, "tasks of the acquire measurement")
	flag.IntVar(&o.PerTask, "per-task", 2, "goroutines (and slots) per acquire task")
	flag.DurationVar(&o.Baseline, "baseline", 10*time.Second, "acquire measurement before the cleanup starts")
	flag.DurationVar(&o.PauseEvery, "pause-every", 2*time.Second, "pause the cleanup once every this much running (0: never)")
	flag.DurationVar(&o.Pause, "pause", 2*time.Second, "length of each pause")
	flag.BoolVar(&o.ReadsAfter, "reads-after", true, "measure the reads again after the cleanup")
	flag.IntVar(&o.Submissions, "submissions", 1_000_000, "submissions seeded after the cleanup, for the metrics scrape (0: no scrape)")
	flag.IntVar(&o.Scrapes, "scrapes", 20, "Prometheus scrapes timed (tasklingprom, every task and submission)")
	seedOnly := flag.Bool("seed-only", false, "only seed a new database, and keep it (its URL is printed; drop it yourself)")
	flag.Parse()
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *seedOnly {
		if err := seed(ctx, o.Seed); err != nil {
			log.Fatalf("scale: %v", err)
		}
		return
	}
	r, err := run(ctx, o)
	if err != nil {
		log.Fatalf("scale: %v", err)
	}
	if !r.Check.OK() {
		os.Exit(1)
	}
}

func run(ctx context.Context, o scale.Options) (*scale.Report, error) {
	serverURL, err := pgcluster.DatabaseURL(ctx)
	if err != nil {
		return nil, err
	}
	db, err := pgtest.CreateDatabase(ctx, serverURL, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := db.Drop(dctx); err != nil {
			log.Printf("scale: %v", err)
		}
	}()
	fmt.Printf("taskling scale: %d executions over %d tasks in database %s\n", o.Seed.Executions, o.Seed.Tasks, db.Name)
	began := time.Now()
	r, err := scale.Run(ctx, db.URL, o, func(format string, args ...any) {
		fmt.Printf("  [%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	})
	if err != nil {
		return nil, err
	}
	fmt.Println()
	r.Print(os.Stdout)
	return r, nil
}

// seed seeds a database that it keeps, for EXPLAIN ANALYZE by hand.
func seed(ctx context.Context, o scale.SeedOptions) error {
	serverURL, err := pgcluster.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	db, err := pgtest.CreateDatabase(ctx, serverURL, true)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := scale.Seed(ctx, pool, o, func(s string) { fmt.Println(s) })
	if err != nil {
		return err
	}
	fmt.Printf("seeded %d executions in %s; kept database %s (DROP DATABASE %s when done)\n", s.Executions, s.Insert.Round(time.Millisecond), db.Name, db.Name)
	return nil
}

// Command bench measures taskling against the floor and the targets of the README's Benchmark, in
// one run (absolute numbers vary 2–3× between runs on this kind of machine; the ratios are what
// to read). `make bench` runs it against the private cluster or TASKLING_DATABASE_URL.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/bench"
	"github.com/taskling-go/taskling/internal/pgcluster"
	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

func main() {
	var (
		dur        = flag.Duration("duration", 4*time.Second, "measuring time per scenario")
		child      = flag.Bool("child", false, "internal: run one process of a multi-process scenario")
		dbURL      = flag.String("database-url", "", "internal: the database of a child")
		goroutines = flag.Int("goroutines", 4, "internal: goroutines of a child")
		limit      = flag.Int("limit", 16, "internal: limit declared by a child")
		iso        = flag.String("isolation", "serializable", "internal: isolation of a child")
		startAt    = flag.Int64("start-at", 0, "internal: unix nanoseconds at which a child starts measuring")
	)
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	if *child {
		if err := runChild(ctx, *dbURL, *goroutines, *limit, *iso, time.Unix(0, *startAt), *dur); err != nil {
			log.Fatalf("bench child: %v", err)
		}
		return
	}
	if err := run(ctx, *dur); err != nil {
		log.Fatalf("bench: %v", err)
	}
}

type row struct {
	name string
	res  bench.Result
}

func run(ctx context.Context, d time.Duration) error {
	serverURL, err := pgcluster.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("taskling bench: %s per scenario, PostgreSQL at %s\n\n", d, redact(serverURL))
	var rows []row
	add := func(name string, res bench.Result, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, row{name, res})
		fmt.Printf("  %-44s %8.0f cycles/s\n", name, res.Rate())
		return nil
	}
	// Each scenario gets a fresh database so that table growth from one does not slow the next.
	fresh := func() (*pgxpool.Pool, func(), error) {
		db, err := pgtest.CreateDatabase(ctx, serverURL, true)
		if err != nil {
			return nil, nil, err
		}
		cfg, err := pgxpool.ParseConfig(db.URL)
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = 80
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return pool, func() { pool.Close(); _ = db.Drop(context.Background()) }, nil
	}
	for _, iso := range []struct {
		name  string
		level pgx.TxIsoLevel
	}{{"serializable", pgx.Serializable}, {"read committed", pgx.ReadCommitted}} {
		for _, g := range []int{1, 16} {
			pool, done, err := fresh()
			if err != nil {
				return err
			}
			res, err := bench.Raw(ctx, pool, iso.level, g, d)
			done()
			if err := add(fmt.Sprintf("floor %s, %d goroutine(s)", iso.name, g), res, err); err != nil {
				return err
			}
		}
	}
	for _, iso := range []taskling.Isolation{taskling.IsolationSerializable, taskling.IsolationReadCommitted} {
		for _, sc := range []struct{ goroutines, tasks int }{{1, 1}, {16, 1}, {64, 64}} {
			pool, done, err := fresh()
			if err != nil {
				return err
			}
			client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso,
				Defaults: bench.Settings(sc.goroutines, sc.tasks)})
			if err != nil {
				done()
				return err
			}
			res, err := bench.Taskling(ctx, client, "bench", sc.goroutines, sc.tasks, d)
			client.Close()
			done()
			name := fmt.Sprintf("taskling %s, %d goroutine(s), %d task(s)", isoName(iso), sc.goroutines, sc.tasks)
			if err := add(name, res, err); err != nil {
				return err
			}
		}
		pool, done, err := fresh()
		if err != nil {
			return err
		}
		res, err := multiProcess(ctx, pool, 4, 4, iso, d)
		done()
		if err := add(fmt.Sprintf("taskling %s, 4 processes × 4 goroutines", isoName(iso)), res, err); err != nil {
			return err
		}
	}
	fmt.Println()
	printTable(rows)
	return nil
}

func isoName(i taskling.Isolation) string {
	if i == taskling.IsolationReadCommitted {
		return "read committed"
	}
	return "serializable"
}

// multiProcess runs procs child processes of goroutines each against one task of the database.
func multiProcess(ctx context.Context, pool *pgxpool.Pool, procs, goroutines int, iso taskling.Isolation, d time.Duration) (bench.Result, error) {
	self, err := os.Executable()
	if err != nil {
		return bench.Result{}, err
	}
	url := pool.Config().ConnString()
	startAt := time.Now().Add(2 * time.Second) // time for every child to connect and warm up
	var (
		mu     sync.Mutex
		merged bench.Result
		wg     sync.WaitGroup
		errs   = make(chan error, procs)
	)
	for range procs {
		cmd := exec.CommandContext(ctx, self, "-child", "-database-url", url,
			"-goroutines", fmt.Sprint(goroutines), "-limit", fmt.Sprint(procs*goroutines),
			"-isolation", isoName(iso), "-start-at", fmt.Sprint(startAt.UnixNano()), "-duration", d.String())
		cmd.Stderr = os.Stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.Output()
			if err != nil {
				errs <- err
				return
			}
			var res bench.Result
			if err := json.Unmarshal(out, &res); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			merged.Merge(res)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return merged, err
	}
	return merged, nil
}

func runChild(ctx context.Context, url string, goroutines, limit int, iso string, startAt time.Time, d time.Duration) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	isolation := taskling.IsolationSerializable
	if iso == "read committed" {
		isolation = taskling.IsolationReadCommitted
	}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: fmt.Sprintf("bench-%d", os.Getpid()),
		Isolation: isolation, Defaults: taskling.TaskSettings{ConcurrencyLimit: limit}})
	if err != nil {
		return err
	}
	defer client.Close()
	// Warm up: create the task row and prepare the statements before the common start.
	if e, err := client.StartExecution(ctx, "bench", "task-0", nil); err == nil {
		_ = e.Complete(ctx)
	}
	time.Sleep(time.Until(startAt))
	res, err := bench.Taskling(ctx, client, "bench", goroutines, 1, d)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func printTable(rows []row) {
	get := func(prefix string) bench.Result {
		for _, r := range rows {
			if strings.HasPrefix(r.name, prefix) {
				return r.res
			}
		}
		return bench.Result{}
	}
	floorSer1, floorSer16 := get("floor serializable, 1 "), get("floor serializable, 16 ")
	floorRC1, floorRC16 := get("floor read committed, 1 "), get("floor read committed, 16 ")
	fmt.Printf("%-46s %10s %9s %9s %9s %7s %10s\n", "scenario", "cycles/s", "p50", "p99", "retries", "failed", "vs floor")
	for _, r := range rows {
		floor := floorSer1
		switch {
		case strings.HasPrefix(r.name, "floor"):
			floor = bench.Result{}
		case strings.Contains(r.name, "read committed") && strings.Contains(r.name, ", 1 goroutine"):
			floor = floorRC1
		case strings.Contains(r.name, "read committed"):
			floor = floorRC16
		case !strings.Contains(r.name, ", 1 goroutine"):
			floor = floorSer16
		}
		ratio := "-"
		if floor.Rate() > 0 {
			ratio = fmt.Sprintf("%.2f×", r.res.Rate()/floor.Rate())
		}
		fmt.Printf("%-46s %10.0f %9s %9s %9d %7d %10s\n", r.name, r.res.Rate(), ms(r.res.Percentile(50)), ms(r.res.Percentile(99)),
			r.res.Retries, r.res.Failed, ratio)
	}
	// Targets are judged on the default isolation, READ COMMITTED.
	one := get("taskling read committed, 1 goroutine(s)")
	sixteen := get("taskling read committed, 16 goroutine(s)")
	tasks64 := get("taskling read committed, 64 goroutine(s)")
	const pglockUncontended = 1100 // midpoint of pglock's ~0.8–1.4 k cycles/s on this kind of machine (README, Benchmark)
	fmt.Println("\nTargets (README, Benchmark), on the default isolation (READ COMMITTED):")
	check := func(ok bool, format string, args ...any) {
		mark := "MET "
		if !ok {
			mark = "MISS"
		}
		fmt.Printf("  [%s] %s\n", mark, fmt.Sprintf(format, args...))
	}
	check(sixteen.Rate() >= 2*floorSer16.Rate(), "one task, 16 goroutines: %.0f cycles/s = %.2f× the raw 16-goroutine SERIALIZABLE loop (%.0f); target ≥ 2×",
		sixteen.Rate(), sixteen.Rate()/floorSer16.Rate(), floorSer16.Rate())
	check(sixteen.Rate() >= pglockUncontended, "one task, 16 goroutines: %.0f cycles/s vs pglock's uncontended ~%d; target ≥ pglock's", sixteen.Rate(), pglockUncontended)
	check(sixteen.Failed == 0, "one task, 16 goroutines: %d failed acquisitions; target 0", sixteen.Failed)
	check(sixteen.Percentile(99) < 20*time.Millisecond, "one task, 16 goroutines: p99 %s; target < 20 ms", ms(sixteen.Percentile(99)))
	check(one.Rate() >= 0.7*floorRC1.Rate(), "uncontended: %.0f cycles/s = %.2f× the raw floor at the same isolation (%.0f); target ≥ 0.7×",
		one.Rate(), one.Rate()/floorRC1.Rate(), floorRC1.Rate())
	check(tasks64.Rate() >= 3*one.Rate(), "64 independent tasks: %.0f cycles/s = %.2f× one task's with one goroutine per task (%.0f); target ≥ 3×",
		tasks64.Rate(), tasks64.Rate()/one.Rate(), one.Rate())
	fmt.Printf("         (and %.2f× one task's with 16 goroutines in one process, where coalescing serves many requests per transaction)\n",
		tasks64.Rate()/sixteen.Rate())
	violations := int64(0)
	for _, r := range rows {
		violations += r.res.Violations
	}
	check(violations == 0, "holders over the limit observed in any scenario: %d; must be 0", violations)
	_ = floorRC16
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

func redact(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

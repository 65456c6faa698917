// Command cron shows taskling's singleton cron: three processes run the scheduler of one task
// scheduled every 3 seconds, and each instant runs exactly once, on whichever process claims it
// first. Midway one process is killed (SIGKILL) and later restarted; the others carry on.
//
//	scripts/with-db.sh go run ./examples/cron              # launcher: 3 processes, ~20 s
//	TASKLING_DATABASE_URL=postgres://… go run ./examples/cron -scheduler -name h1
//
// The launcher works in a database of its own that it creates and drops. With -scheduler, the
// program is one scheduler host on the database you name, until SIGINT or SIGTERM.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

const (
	app, task = "reports", "hourly-rollup"
	spec      = "*/3 * * * * *" // every 3 s, so the example takes seconds; "0 * * * *" in real life
)

func main() {
	log.SetFlags(0)
	var (
		dbURL     = flag.String("database-url", os.Getenv("TASKLING_DATABASE_URL"), "PostgreSQL URL (default $TASKLING_DATABASE_URL)")
		scheduler = flag.Bool("scheduler", false, "run one scheduler host (instead of the three-process launcher)")
		name      = flag.String("name", "", "host name recorded on executions (default: the OS host name)")
		duration  = flag.Duration("duration", 20*time.Second, "launcher: how long the three processes run")
	)
	flag.Parse()
	if *dbURL == "" {
		log.Fatal("cron: set -database-url or TASKLING_DATABASE_URL (or run it under scripts/with-db.sh)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *scheduler {
		err = runScheduler(ctx, *dbURL, *name)
	} else {
		err = launch(ctx, *dbURL, *duration)
	}
	if err != nil {
		log.Fatalf("cron: %v", err)
	}
}

// runScheduler is one host: it registers the task and runs the scheduler until ctx ends.
func runScheduler(ctx context.Context, dbURL, name string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: name})
	if err != nil {
		return err
	}
	defer client.Close()
	rollup := func(ctx context.Context, exec *taskling.Execution) error {
		fmt.Printf("%s  %-3s runs the rollup for %s (execution %d)\n",
			time.Now().Format("15:04:05.000"), name, exec.ScheduledFor().Format("15:04:05"), exec.ID())
		return exec.Checkpoint(ctx, "rolled up")
	}
	err = client.Schedule(ctx, app, task, spec, rollup, &taskling.ScheduleOptions{
		TimeZone: "Europe/London",
		CatchUp:  taskling.CatchUpRunLatest, // after an outage: one run, for the latest missed instant
		Overlap:  taskling.OverlapSkip,      // a run still going when the next instant comes: skip it (recorded)
	})
	if err != nil {
		return err
	}
	return client.RunScheduler(ctx)
}

// launch starts three scheduler processes on a fresh database, kills one midway and restarts
// it, then prints which host ran each instant.
func launch(ctx context.Context, serverURL string, duration time.Duration) error {
	db, err := pgtest.CreateDatabase(ctx, serverURL, false)
	if err != nil {
		return err
	}
	defer func() { _ = db.Drop(context.WithoutCancel(ctx)) }()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("== 3 scheduler processes, task %s/%s, spec %q, for %s; h2 is killed with SIGKILL midway and restarted\n", app, task, spec, duration)
	start := func(name string) (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, self, "-scheduler", "-database-url", db.URL, "-name", name)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fmt.Println(sc.Text())
			}
		}()
		return cmd, nil
	}
	hosts := map[string]*exec.Cmd{}
	for _, name := range []string{"h1", "h2", "h3"} {
		if hosts[name], err = start(name); err != nil {
			return err
		}
	}
	sleep(ctx, duration/3)
	fmt.Printf("%s  -- kill -9 h2\n", time.Now().Format("15:04:05.000"))
	_ = hosts["h2"].Process.Kill()
	_ = hosts["h2"].Wait()
	sleep(ctx, duration/3)
	fmt.Printf("%s  -- restart h2\n", time.Now().Format("15:04:05.000"))
	if hosts["h2"], err = start("h2"); err != nil {
		return err
	}
	sleep(ctx, duration/3)
	for _, cmd := range hosts {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range hosts {
		_ = cmd.Wait()
	}
	return report(ctx, db.URL)
}

// report prints each scheduled instant with the executions that ran it: one each.
func report(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "report"})
	if err != nil {
		return err
	}
	defer client.Close()
	infos, err := client.LastExecutions(ctx, app, task, 1000)
	if err != nil {
		return err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].ScheduledFor.Before(infos[j].ScheduledFor) })
	perInstant := map[time.Time]int{}
	fmt.Println("\n== history: instant, host, status")
	for _, in := range infos {
		perInstant[in.ScheduledFor]++
		fmt.Printf("%s  %-3s %s\n", in.ScheduledFor.Format("15:04:05"), in.Host, in.Status)
	}
	dups := 0
	for _, n := range perInstant {
		dups += n - 1
	}
	fmt.Printf("== %d instants, %d executions, %d duplicates\n", len(perInstant), len(infos), dups)
	events, err := client.ScheduleHistory(ctx, app, task, 100)
	if err != nil {
		return err
	}
	for _, e := range events {
		fmt.Printf("schedule event: %s %s\n", e.Kind, e.Detail)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

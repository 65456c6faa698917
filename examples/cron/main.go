// Command cron shows taskling's singleton cron: three processes run the scheduler of one task
// scheduled every 3 seconds, and each instant runs exactly once, on whichever process claims it
// first. Midway the process that is running the job is killed (SIGKILL) in the middle of its run:
// its execution is judged dead and the next instant runs on another process. The killed process
// is restarted later; the others carry on.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
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
	// A dead host's run is judged dead 2 s after its last heartbeat, before the next instant.
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: name, Defaults: taskling.TaskSettings{
		KeepAliveInterval: 500 * time.Millisecond, KeepAliveDeathThreshold: 2 * time.Second}})
	if err != nil {
		return err
	}
	defer client.Close()
	rollup := func(ctx context.Context, exec *taskling.Execution) error {
		fmt.Printf("%s  %-3s starts the rollup for %s (execution %d)\n",
			time.Now().Format("15:04:05.000"), name, exec.ScheduledFor().Format("15:04:05"), exec.ID())
		select { // the rollup takes a while: long enough to be killed in the middle of it
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		fmt.Printf("%s  %-3s finished the rollup for %s\n", time.Now().Format("15:04:05.000"), name, exec.ScheduledFor().Format("15:04:05"))
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

// launch starts three scheduler processes on a fresh database, kills the one running the job in
// the middle of its run and later restarts it, then prints which host ran each instant.
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
	fmt.Printf("== 3 scheduler processes, task %s/%s, spec %q, for %s; the host running the job is killed with SIGKILL mid-run, then restarted\n", app, task, spec, duration)
	runs := &runTracker{running: map[string]run{}}
	start := func(name string) (*exec.Cmd, error) {
		cmd := schedulerCommand(ctx, self, db.URL, name)
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
				runs.observe(name, sc.Text())
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
	victim, instant := runs.waitForARun(ctx)
	if victim == "" {
		return ctx.Err()
	}
	sleep(ctx, 500*time.Millisecond) // in the middle of its 1.5 s run
	fmt.Printf("%s  -- kill -9 %s, in the middle of its run for %s\n", time.Now().Format("15:04:05.000"), victim, instant)
	_ = hosts[victim].Process.Kill()
	_ = hosts[victim].Wait()
	sleep(ctx, duration/3)
	fmt.Printf("%s  -- restart %s\n", time.Now().Format("15:04:05.000"), victim)
	if hosts[victim], err = start(victim); err != nil {
		return err
	}
	sleep(ctx, duration/3)
	for _, cmd := range hosts {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range hosts {
		_ = cmd.Wait()
	}
	return report(ctx, db.URL, victim, instant)
}

// schedulerCommand is one scheduler host of the launcher. The database URL, password and all,
// goes in its environment: a command line is anyone's to read (ps).
func schedulerCommand(ctx context.Context, self, dbURL, name string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, self, "-scheduler", "-name", name)
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+dbURL)
	return cmd
}

// runTracker follows the hosts' output: which host is running the job, for which instant.
type runTracker struct {
	mu      sync.Mutex
	running map[string]run // host -> the run it is in
}

type run struct {
	instant string
	seen    time.Time // when its start was printed
}

func (r *runTracker) observe(host, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fields := strings.Fields(line)
	switch {
	case strings.Contains(line, " starts the rollup for ") && len(fields) >= 7:
		r.running[host] = run{instant: fields[6], seen: time.Now()} // "15:04:05.000 h1 starts the rollup for 15:04:05 (execution N)"
	case strings.Contains(line, " finished the rollup for "):
		delete(r.running, host)
	}
}

// waitForARun waits until some host has just started the job (so that it is still running half
// a second later) and returns it with the instant.
func (r *runTracker) waitForARun(ctx context.Context) (host, instant string) {
	for ctx.Err() == nil {
		r.mu.Lock()
		for h, at := range r.running {
			if time.Since(at.seen) < 300*time.Millisecond {
				host, instant = h, at.instant
			}
		}
		r.mu.Unlock()
		if host != "" {
			return host, instant
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return "", ""
}

// report prints each scheduled instant with the executions that ran it: one each. It points out
// the killed run (dead) and the instant after it, which another host ran.
func report(ctx context.Context, dbURL, victim, killedInstant string) error {
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
	next := false
	for _, in := range infos {
		perInstant[in.ScheduledFor]++
		note := ""
		switch at := in.ScheduledFor.Format("15:04:05"); {
		case at == killedInstant && in.Host == victim:
			note, next = "  <- killed mid-run: judged dead, its slot reclaimed", true
		case next && in.Status != taskling.StatusBlocked:
			note, next = "  <- the next instant, taken by another host", false
		}
		fmt.Printf("%s  %-3s %s%s\n", in.ScheduledFor.Format("15:04:05"), in.Host, in.Status, note)
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
		fmt.Println("schedule event:", describeEvent(e))
	}
	return nil
}

// describeEvent is a schedule event in words: its detail where it has one (a registration or a
// change, which names itself), else its kind and the instants it covers.
func describeEvent(e taskling.ScheduleEvent) string {
	if e.Detail != "" {
		return e.Detail
	}
	if e.Instants == 0 {
		return string(e.Kind)
	}
	return fmt.Sprintf("%s %d instants, %s to %s", e.Kind, e.Instants, e.First.Format("15:04:05"), e.Last.Format("15:04:05"))
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

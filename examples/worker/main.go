// Command worker wraps a batch job with taskling: every run takes one of the task's slots
// fleet-wide (waiting for one if all are held), reports progress, and returns the slot when done.
// Start as many copies as you like, on as many hosts as you like: at most the task's limit run
// the job at once.
//
//	TASKLING_DATABASE_URL=postgres://… go run ./examples/worker -name w1 -runs 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

func main() {
	var (
		dbURL = flag.String("database-url", os.Getenv("TASKLING_DATABASE_URL"), "PostgreSQL URL (default $TASKLING_DATABASE_URL)")
		name  = flag.String("name", "", "host name recorded on executions (default: the OS host name)")
		app   = flag.String("app", "billing", "application name")
		task  = flag.String("task", "export", "task name")
		limit = flag.Int("limit", 2, "the concurrency limit this worker declares (an operator override wins)")
		runs  = flag.Int("runs", 3, "how many batch runs to do")
		items = flag.Int("items", 10, "items per run")
		pace  = flag.Duration("item-time", 100*time.Millisecond, "time to process one item")
	)
	flag.Parse()
	if *dbURL == "" {
		log.Fatal("worker: set -database-url or TASKLING_DATABASE_URL")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dbURL, *name, *app, *task, *limit, *runs, *items, *pace); err != nil {
		log.Fatalf("worker %s: %v", *name, err)
	}
}

func run(ctx context.Context, dbURL, name, app, task string, limit, runs, items int, pace time.Duration) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	client, err := taskling.NewClient(pool, &taskling.Config{
		HostName: name,
		Defaults: taskling.TaskSettings{ConcurrencyLimit: limit, KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 5 * time.Second},
	})
	if err != nil {
		return err
	}
	defer client.Close()

	for i := 1; i <= runs; i++ {
		opts := &taskling.StartOptions{
			ReferenceValue: fmt.Sprintf("%s-run-%d", name, i),
			Header:         map[string]any{"worker": name, "run": i},
			WaitForSlot:    true,
		}
		err := client.Run(ctx, app, task, func(ctx context.Context, exec *taskling.Execution) error {
			fmt.Printf("%s  %-4s got a slot: execution %d, fencing token %d\n", stamp(), name, exec.ID(), exec.FencingToken())
			return batchJob(ctx, exec, items, pace)
		}, opts)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Printf("%s  %-4s done, slot returned\n", stamp(), name)
	}
	return nil
}

// batchJob is the user's work: it processes items, reporting progress, and stops as soon as
// its context ends (for example because the execution lost its slot).
func batchJob(ctx context.Context, exec *taskling.Execution, items int, pace time.Duration) error {
	for done := range items {
		if err := exec.SetProgress(ctx, int64(done), int64(items)); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(pace):
		}
	}
	if err := exec.SetProgress(ctx, int64(items), int64(items)); err != nil {
		return err
	}
	return exec.Checkpoint(ctx, fmt.Sprintf("processed %d items", items))
}

func stamp() string { return time.Now().Format("15:04:05.000") }

package taskling_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// A batch job that at most two hosts run at once.
func ExampleClient_Run() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TASKLING_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	client, err := taskling.NewClient(pool, &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 2}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.Run(ctx, "billing", "export", func(ctx context.Context, exec *taskling.Execution) error {
		// Pass the fencing token to the stores the job writes to; stop when ctx ends.
		fmt.Println("exporting with fencing token", exec.FencingToken())
		return exec.SetProgress(ctx, 10, 10)
	}, &taskling.StartOptions{ReferenceValue: "2026-11-21.csv"})
	switch {
	case errors.Is(err, taskling.ErrLimitReached):
		fmt.Println("two other hosts are exporting; try later")
	case err != nil:
		log.Fatal(err)
	}
}

// Holding a slot explicitly, and waiting for one instead of failing.
func ExampleClient_StartExecution() {
	ctx := context.Background()
	var client *taskling.Client // from taskling.NewClient

	exec, err := client.StartExecution(ctx, "billing", "import", &taskling.StartOptions{WaitForSlot: true})
	if err != nil {
		log.Fatal(err)
	}
	defer exec.Complete(ctx)
	work := exec.Context() // cancelled with cause ErrLeaseLost if the slot may have been lost
	<-work.Done()
}

// An operator raises a task's limit while the fleet runs; every host's next start obeys.
func ExampleClient_UpdateTaskSettings() {
	ctx := context.Background()
	var client *taskling.Client // from taskling.NewClient
	limit := 5
	if err := client.UpdateTaskSettings(ctx, "billing", "export", taskling.SettingsUpdate{ConcurrencyLimit: &limit}); err != nil {
		log.Fatal(err)
	}
}

// Operator changes made as a named operator: the task's audit trail records alice as their
// principal and the ticket as their by.
func ExampleClient_As() {
	ctx := context.Background()
	var client *taskling.Client // from taskling.NewClient
	ops := client.As(taskling.Operator{Name: "alice", Note: "OPS-1234"})
	limit := 3
	if err := ops.UpdateTaskSettings(ctx, "billing", "export", taskling.SettingsUpdate{ConcurrencyLimit: &limit}); err != nil {
		log.Fatal(err)
	}
	if err := ops.RetireTask(ctx, "billing", "export-v1"); err != nil {
		log.Fatal(err)
	}
	page, err := client.TaskChanges(ctx, "billing", "export", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range page.Changes {
		fmt.Println(c.At, c.Principal, c.By, c.Field, c.Old, c.New)
	}
}

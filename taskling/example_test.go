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
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
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

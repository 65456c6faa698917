package taskling_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/taskling-go/taskling/taskling"
)

// A daily 04:00 job in New York that runs exactly once per day across every host running the
// scheduler. After an outage it runs once, for the latest missed day, unless that day is more
// than 6 hours old.
func ExampleClient_Schedule() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var client *taskling.Client // from taskling.NewClient

	err := client.Schedule(ctx, "billing", "nightly-invoices", "0 4 * * *",
		func(ctx context.Context, exec *taskling.Execution) error {
			day := exec.ScheduledFor() // the instant claimed, not the wall clock now
			return buildInvoices(ctx, day)
		},
		&taskling.ScheduleOptions{
			TimeZone:      "America/New_York",
			CatchUp:       taskling.CatchUpRunLatest,
			CatchUpWindow: 6 * time.Hour,
		})
	if err != nil {
		log.Fatal(err) // a bad spec or zone is named in the error
	}
	if err := client.RunScheduler(ctx); err != nil { // every host runs it; none is a leader
		log.Fatal(err)
	}
}

// Deliberate catch-up: run the instants of the last three days that were skipped or expired.
func ExampleClient_Backfill() {
	ctx := context.Background()
	var client *taskling.Client // with "billing"/"nightly-invoices" registered by Schedule

	ran, err := client.Backfill(ctx, "billing", "nightly-invoices", time.Now().AddDate(0, 0, -3), time.Now())
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("backfilled %d days", len(ran))
}

func buildInvoices(context.Context, time.Time) error { return nil }

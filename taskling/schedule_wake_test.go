package taskling_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestSchedulerWakesWhenTheSlotFreesRightAfterADeniedClaim is issue 15 item 1: a catch-up run
// that waited for the slot its predecessor in the same process had just released slept for a
// whole death threshold (the loop subscribed to wake-ups only after its claim was denied, so a
// release in between was lost), and the on-time instant after the outage was then skipped. The
// release is made to land exactly in that gap.
func TestSchedulerWakesWhenTheSlotFreesRightAfterADeniedClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// A lost wake-up would cost the holder's whole threshold (20 s): far beyond the test's bound.
	c := newClient(t, b.pool, &taskling.Config{MaxPollInterval: 30 * time.Second, Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 1, KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 20 * time.Second}})
	holder, err := c.StartExecution(b.ctx, "app", "cron", nil)
	require.NoError(t, err)

	var once sync.Once
	released := make(chan time.Time, 1)
	c.OnClaimDeniedForTest(func() {
		once.Do(func() {
			require.NoError(t, holder.Complete(context.Background()))
			released <- time.Now()
		})
	})
	ran := make(chan time.Time, 16)
	require.NoError(t, c.Schedule(b.ctx, "app", "cron", "* * * * * *", func(context.Context, *taskling.Execution) error {
		ran <- time.Now()
		return nil
	}, &taskling.ScheduleOptions{Overlap: taskling.OverlapWait}))
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- c.RunScheduler(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	var at time.Time
	select {
	case at = <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the scheduler never tried to claim while the slot was held")
	}
	select {
	case runAt := <-ran:
		require.Less(t, runAt.Sub(at), 2*time.Second, "woken by the release")
	case <-time.After(3 * time.Second):
		t.Fatal("the release right after the denied claim did not wake the scheduler: a lost wake-up")
	}
}

package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// startRatedCron runs a schedule of every second under a rate of one per 1.5 s (limit 5: the slots
// never bind).
func startRatedCron(t *testing.T, opts *taskling.ScheduleOptions) (*recorder, *cronHost) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	c := newClient(t, pool, &taskling.Config{HostName: "host-a",
		Defaults: taskling.TaskSettings{ConcurrencyLimit: 5, Rate: taskling.Rate{Count: 2, Per: 3 * time.Second}}})
	rec := &recorder{}
	require.NoError(t, c.Schedule(context.Background(), "app", "cron", "* * * * * *", rec.fn("host-a", 0), opts))
	ctx, cancel := context.WithCancel(context.Background())
	h := &cronHost{client: c, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- c.RunScheduler(ctx) }()
	t.Cleanup(h.stop)
	return rec, h
}

// TestScheduleOverlapSkipRecordsInstantsARateRefuses: a schedule of every second under a rate of
// one per 1.5 s. Under OverlapSkip an instant the task's rate
// refuses is not run but recorded as Blocked with its ScheduledFor, like one the limit refuses;
// the runs keep the rate.
func TestScheduleOverlapSkipRecordsInstantsARateRefuses(t *testing.T) {
	t.Parallel()
	rec, h := startRatedCron(t, nil)
	waitFor(t, 15*time.Second, "three runs", func() bool { return len(rec.snapshot()) >= 3 })
	h.stop()
	ran, blocked := scheduledExecutions(t, h.client)
	require.GreaterOrEqual(t, len(blocked), 2, "instants between the rate's units are recorded as Blocked")
	for i := 1; i < len(ran); i++ {
		gap := ran[i].Sub(ran[i-1]).Abs()
		require.GreaterOrEqual(t, gap, 2*time.Second, "runs of instants 1 s apart would be 2 grants within the rate's 1.5 s")
	}
	infos, err := h.client.LastExecutions(context.Background(), "app", "cron", 100)
	require.NoError(t, err)
	rated := 0
	for _, e := range infos {
		if e.Status == taskling.StatusBlocked && !e.ScheduledFor.IsZero() {
			require.Contains(t, e.BlockedReason, "rate", "the record says the rate refused it")
			rated++
		}
	}
	require.Equal(t, len(blocked), rated)
}

// TestScheduleOverlapWaitRunsInstantsOnceTheRateHasRoom: under OverlapWait with RunAll, every
// instant runs, each once the rate has room for it: the runs fall behind the schedule rather than
// burst past the rate, and none is recorded as Blocked.
func TestScheduleOverlapWaitRunsInstantsOnceTheRateHasRoom(t *testing.T) {
	t.Parallel()
	rec, h := startRatedCron(t, &taskling.ScheduleOptions{Overlap: taskling.OverlapWait, CatchUp: taskling.CatchUpRunAll})
	waitFor(t, 15*time.Second, "four runs", func() bool { return len(rec.snapshot()) >= 4 })
	h.stop()
	runs := rec.snapshot()
	t0 := runs[0].instant
	require.Equal(t, "T0+0s T0+1s T0+2s T0+3s", fmtOffsets(t0, []time.Time{runs[0].instant, runs[1].instant, runs[2].instant, runs[3].instant}))
	require.GreaterOrEqual(t, runs[3].start.Sub(runs[1].start), 2900*time.Millisecond, "two per 3 s: the third run waited for the rate")
	_, blocked := scheduledExecutions(t, h.client)
	require.Empty(t, blocked)
}

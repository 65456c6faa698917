package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// startRatedCron runs task app/name on a schedule of every second under a rate of one per 1.5 s
// (limit 5: the slots never bind), in a client of its own on pool.
func startRatedCron(t *testing.T, pool *pgxpool.Pool, name string, opts *taskling.ScheduleOptions) (*recorder, *cronHost) {
	t.Helper()
	c := newClient(t, pool, &taskling.Config{HostName: "host-" + name,
		Defaults: taskling.TaskSettings{ConcurrencyLimit: 5, Rate: taskling.Rate{Count: 2, Per: 3 * time.Second}}})
	rec := &recorder{}
	require.NoError(t, c.Schedule(context.Background(), "app", name, "* * * * * *", rec.fn("host-"+name, 0), opts))
	ctx, cancel := context.WithCancel(context.Background())
	h := &cronHost{client: c, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- c.RunScheduler(ctx) }()
	t.Cleanup(h.stop)
	return rec, h
}

// TestScheduledInstantsARateRefusesFollowTheirOverlapPolicy: two schedules of every second, each
// under a rate of one per 1.5 s. Under OverlapSkip an instant the rate refuses is not run but
// recorded as Blocked with its ScheduledFor (its reason names the rate), like one the limit
// refuses, and the runs keep the rate. Under OverlapWait with RunAll every instant runs, each once
// the rate has room for it: the runs fall behind the schedule rather than burst past the rate, and
// none is recorded as Blocked.
func TestScheduledInstantsARateRefusesFollowTheirOverlapPolicy(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	skipRec, skip := startRatedCron(t, pool, "skip", nil)
	waitRec, wait := startRatedCron(t, pool, "wait", &taskling.ScheduleOptions{Overlap: taskling.OverlapWait, CatchUp: taskling.CatchUpRunAll})
	waitFor(t, 15*time.Second, "three runs skipping, four waiting", func() bool { return len(skipRec.snapshot()) >= 3 && len(waitRec.snapshot()) >= 4 })
	skip.stop()
	wait.stop()

	ran, blocked := scheduledExecutionsOf(t, skip.client, "skip")
	require.GreaterOrEqual(t, len(blocked), 2, "instants between the rate's units are recorded as Blocked")
	for i := 1; i < len(ran); i++ {
		require.GreaterOrEqual(t, ran[i].Sub(ran[i-1]).Abs(), 2*time.Second, "runs of instants 1 s apart would be 2 grants within the rate's 1.5 s")
	}
	infos, err := skip.client.LastExecutions(context.Background(), "app", "skip", 100)
	require.NoError(t, err)
	rated := 0
	for _, e := range infos {
		if e.Status == taskling.StatusBlocked && !e.ScheduledFor.IsZero() {
			require.Contains(t, e.BlockedReason, "rate", "the record says the rate refused it")
			rated++
		}
	}
	require.Equal(t, len(blocked), rated)

	runs := waitRec.snapshot()
	t0 := runs[0].instant
	require.Equal(t, "T0+0s T0+1s T0+2s T0+3s", fmtOffsets(t0, []time.Time{runs[0].instant, runs[1].instant, runs[2].instant, runs[3].instant}))
	require.GreaterOrEqual(t, runs[3].start.Sub(runs[1].start), 2900*time.Millisecond, "two per 3 s: the third run waited for the rate")
	_, blocked = scheduledExecutionsOf(t, wait.client, "wait")
	require.Empty(t, blocked)
}

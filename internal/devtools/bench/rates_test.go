package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// TestRateScenarios runs `make bench`'s rate scenarios briefly at both isolation levels, under a
// rate that binds 8 goroutines (200/s, burst 2: at most 21 units in 100 ms): waiting starts, and
// starts that sleep a refusal's RetryAfter, never over the rate in a window of the database's
// grant times.
func TestRateScenarios(t *testing.T) {
	ctx := context.Background()
	rate := taskling.Rate{Count: 20, Per: 100 * time.Millisecond, Burst: 2}
	for _, iso := range isolations {
		pool, _ := pgtest.NewDB(t)
		res, err := bench.RatedWaits(ctx, newClient(t, pool, iso, bench.RateSettings(10, rate)), "bench", 8, rate, short)
		require.NoError(t, err)
		require.Positive(t, res.Cycles)
		require.Zero(t, res.Violations, "grants over the rate; most units in a window %d", res.MaxWindow)
		require.LessOrEqual(t, res.MaxWindow, int64(21))
		require.Zero(t, res.Failed)

		pool, _ = pgtest.NewDB(t)
		res, err = bench.RatedStarts(ctx, newClient(t, pool, iso, bench.RateSettings(10, rate)), "bench", 8, rate, short)
		require.NoError(t, err)
		require.Positive(t, res.Cycles)
		require.Positive(t, res.Failed, "the rate refused no start")
		require.Len(t, res.Latencies, int(res.Cycles), "one acquire latency per granted start")
		require.Zero(t, res.Violations, "grants over the rate; most units in a window %d", res.MaxWindow)

		pool, _ = pgtest.NewDB(t)
		res, err = bench.RatedStarts(ctx, newClient(t, pool, iso, bench.RateSettings(10, taskling.Rate{})), "bench", 8, taskling.Rate{}, short)
		require.NoError(t, err)
		require.Zero(t, res.Failed, "refused without a rate")
		require.Len(t, res.Latencies, int(res.Cycles))
	}
}

// TestRateWindowsFindGrantsOverTheRate: the rate scenarios' check can fail on a real run. The
// client declares 200/s burst 2 while the check judges by 10/s (1 per 100 ms): even a loaded
// machine, where 8 goroutines get a few grants per 100 ms, puts two in some window (the
// window arithmetic itself: TestWindowsOverFindsGrantsOverTheRate).
func TestRateWindowsFindGrantsOverTheRate(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	declared := taskling.Rate{Count: 20, Per: 100 * time.Millisecond, Burst: 2}
	res, err := bench.RatedStarts(ctx, newClient(t, pool, taskling.IsolationReadCommitted, bench.RateSettings(10, declared)), "bench", 8,
		taskling.Rate{Count: 1, Per: 100 * time.Millisecond}, short)
	require.NoError(t, err)
	t.Logf("%d grants in %s, most units in a window %d, grants over %d", res.Cycles, res.Elapsed, res.MaxWindow, res.Violations)
	require.Positive(t, res.Violations)
	require.Greater(t, res.MaxWindow, int64(1))
}

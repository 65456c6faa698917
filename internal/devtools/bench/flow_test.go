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

// TestFlowShortProfile runs the waiting and submission scenarios of `make bench` briefly: they
// work, every submission is drained, and the busy time counted stays within its bound.
func TestFlowShortProfile(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client := newClient(t, pool, taskling.IsolationReadCommitted, taskling.TaskSettings{ConcurrencyLimit: 3})
	// One run first: the task's declaration and first reads are not the window's to wait for (a
	// loaded machine took longer than the window over them, and counted no run).
	require.NoError(t, client.Run(ctx, "bench", "busy", func(context.Context, *taskling.Execution) error { return nil }, nil))
	window := 2 * time.Second
	busy, runs, err := bench.Busy(ctx, client, "bench", "busy", 6, 50*time.Millisecond, time.Now(), window)
	require.NoError(t, err)
	require.Positive(t, runs)
	require.LessOrEqual(t, busy, 3*window, "3 slots cannot be busy for longer than 3 × the window")

	submitted, direct, err := bench.Drain(ctx, client, pool, "bench", 3, 60)
	require.NoError(t, err)
	require.Positive(t, submitted)
	require.Positive(t, direct)
	var completed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskling.submission WHERE status = 3 AND attempts = 1`).Scan(&completed))
	require.Equal(t, 60, completed)

	latencies, err := bench.EndToEnd(ctx, client, "bench", 2, 5, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, latencies, 5)
}

func TestHandoverLatenciesCountOnlyHandoversBetweenProcesses(t *testing.T) {
	ms := int64(time.Millisecond)
	logs := [][]bench.Handoff{
		{{Granted: 0, Released: 10 * ms}, {Granted: 11 * ms, Released: 20 * ms}, {Granted: 40 * ms, Released: 50 * ms}},
		{{Granted: 23 * ms, Released: 30 * ms}},
	}
	// 0 → 11 stays in process 0; 20 → 23 and 30 → 40 change process.
	require.Equal(t, []time.Duration{3 * time.Millisecond, 10 * time.Millisecond}, bench.HandoverLatencies(logs))
}

func TestClipCountsOnlyTheWindow(t *testing.T) {
	start := time.Unix(100, 0)
	end := start.Add(time.Second)
	require.Equal(t, 500*time.Millisecond, bench.ClipForTest(start.Add(-time.Second), start.Add(500*time.Millisecond), start, end))
	require.Equal(t, time.Duration(0), bench.ClipForTest(end.Add(time.Second), end.Add(2*time.Second), start, end))
}

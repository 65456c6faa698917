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

// TestBlocksShortProfile runs the block scenarios of `make bench` briefly: both loops complete
// blocks, every range is created once, and every item of each commit mode ends completed.
func TestBlocksShortProfile(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client := newClient(t, pool, taskling.IsolationReadCommitted, taskling.TaskSettings{ConcurrencyLimit: -1})
	n, err := bench.BlockCycles(ctx, client, "bench", "blocks", 3, 4, time.Now(), 500*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, n)
	raw, err := bench.RawBlockCycles(ctx, pool, 3, 4, time.Now(), 500*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, raw)
	var ranges, distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (task_id, from_number)) FROM taskling.block WHERE status = 3`).Scan(&ranges, &distinct))
	require.EqualValues(t, n+raw, ranges)
	require.Equal(t, ranges, distinct)

	for _, mode := range []taskling.CommitMode{taskling.CommitEachItem, taskling.CommitPeriodically, taskling.CommitAtEnd} {
		rate, err := bench.ItemCommits(ctx, client, "bench", "items", mode, 250, 100)
		require.NoError(t, err)
		require.Positive(t, rate)
		rate, err = bench.RawItemCommits(ctx, client, pool, "bench", "raw-items", mode, 250, 100)
		require.NoError(t, err)
		require.Positive(t, rate)
	}
	var pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskling.list_item WHERE status <> 2`).Scan(&pending))
	require.Zero(t, pending)
}

package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/testutil"

	"github.com/taskling-go/taskling/internal/bench"
	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// TestShortProfile runs every scenario of `make bench` briefly: it proves the benchmark works and
// that no scenario ever sees more holders than the limit. Throughput is not asserted here.
func TestShortProfile(t *testing.T) {
	ctx := context.Background()
	const d = 300 * time.Millisecond
	for _, iso := range []pgx.TxIsoLevel{pgx.Serializable, pgx.ReadCommitted} {
		pool, _ := pgtest.NewDB(t)
		res, err := bench.Raw(ctx, pool, iso, 4, d)
		require.NoError(t, err)
		require.Positive(t, res.Cycles)
	}
	for _, iso := range []taskling.Isolation{taskling.IsolationReadCommitted, taskling.IsolationSerializable} {
		for _, sc := range []struct{ goroutines, tasks int }{{1, 1}, {8, 1}, {8, 8}} {
			pool, _ := pgtest.NewDB(t)
			client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso, Defaults: bench.Settings(sc.goroutines, sc.tasks)})
			require.NoError(t, err)
			res, err := bench.Taskling(ctx, client, "bench", sc.goroutines, sc.tasks, d)
			client.Close()
			require.NoError(t, err)
			require.Positive(t, res.Cycles)
			require.Zero(t, res.Violations, "more holders than the limit")
			require.Zero(t, res.Failed, "a limit that admits every goroutine never denies")
			require.Len(t, res.Latencies, int(res.Cycles))
		}
	}
}

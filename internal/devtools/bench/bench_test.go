package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

const short = 300 * time.Millisecond

var isolations = []taskling.Isolation{taskling.IsolationReadCommitted, taskling.IsolationSerializable}

// countedPool is a fresh migrated database whose pool counts the statements it sends.
func countedPool(t *testing.T) (*pgxpool.Pool, *bench.StatementCounter) {
	t.Helper()
	_, url := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	counter := &bench.StatementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, counter
}

func newClient(t *testing.T, pool *pgxpool.Pool, iso taskling.Isolation, s taskling.TaskSettings) *taskling.Client {
	t.Helper()
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso, Defaults: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return client
}

// TestShortProfile runs the floors and every in-process scenario of `make bench` briefly: it
// proves the benchmark works and that no scenario ever sees more holders than the limit.
// Throughput is not asserted here; statements per cycle are (a cheap cycle is issue 10's).
func TestShortProfile(t *testing.T) {
	ctx := context.Background()
	for _, iso := range []pgx.TxIsoLevel{pgx.Serializable, pgx.ReadCommitted} {
		pool, _ := pgtest.NewDB(t)
		res, err := bench.Raw(ctx, pool, iso, 4, short)
		require.NoError(t, err)
		require.Positive(t, res.Cycles)
		res, err = bench.RawTasks(ctx, pool, iso, 8, short)
		require.NoError(t, err)
		require.Positive(t, res.Cycles)
	}
	for _, iso := range isolations {
		for _, sc := range []struct{ goroutines, tasks int }{{1, 1}, {8, 1}, {8, 8}} {
			pool, counter := countedPool(t)
			client := newClient(t, pool, iso, bench.Settings(sc.goroutines, sc.tasks))
			// A first round outside the count: the declaration and the first reads of the task
			// row weighed on too few cycles when a loaded machine ran few in the window.
			_, err := bench.Taskling(ctx, client, "bench", sc.goroutines, sc.tasks, 50*time.Millisecond)
			require.NoError(t, err)
			res, err := bench.Measured(ctx, pool, counter, func() (bench.Result, error) {
				return bench.Taskling(ctx, client, "bench", sc.goroutines, sc.tasks, short)
			})
			require.NoError(t, err)
			require.Positive(t, res.Cycles)
			require.Zero(t, res.Violations, "more holders than the limit")
			require.Zero(t, res.Failed, "a limit that admits every goroutine never denies")
			require.Len(t, res.Latencies, int(res.Cycles))
			if sc.goroutines == 1 {
				// One start and one completion, one round trip each once the task row is cached
				// (about 10 statements a cycle); the cycle before issue 10 sent 16.
				perCycle := float64(res.Statements) / float64(res.Cycles)
				t.Logf("isolation %d: %.1f statements, %.0f WAL bytes per cycle", iso, perCycle, float64(res.WALBytes)/float64(res.Cycles))
				require.Less(t, perCycle, 13.0, "statements per uncontended cycle, isolation %d", iso)
			}
		}
		pool, _ := pgtest.NewDB(t)
		res, err := bench.Waiting(ctx, newClient(t, pool, iso, taskling.TaskSettings{ConcurrencyLimit: 2}), "bench", 6, 2, short)
		require.NoError(t, err)
		require.Positive(t, res.Cycles)
		require.Zero(t, res.Violations, "more holders than the limit while waiting")
	}
}

// TestWaitingSweepFindsTooManyHolders: the waiting scenario's check can fail. Its clients declare
// a limit of 3 while the sweep judges by 2: grants beyond 2 are counted.
func TestWaitingSweepFindsTooManyHolders(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	res, err := bench.Waiting(ctx, newClient(t, pool, taskling.IsolationReadCommitted, taskling.TaskSettings{ConcurrencyLimit: 3}), "bench", 6, 2, short)
	require.NoError(t, err)
	require.Positive(t, res.Violations)
}

// TestHeartbeatsCostPerProcess holds 300 executions in one client for longer than their
// threshold: none loses its lease, and the heartbeats are a few statements a second for the whole
// process (one per holder per interval would be 300 a second).
func TestHeartbeatsCostPerProcess(t *testing.T) {
	ctx := context.Background()
	pool, counter := countedPool(t)
	client := newClient(t, pool, taskling.IsolationReadCommitted, bench.HeartbeatSettings(100))
	holders, err := bench.Hold(ctx, client, "bench", 3, 300)
	require.NoError(t, err)
	before := counter.Count()
	const window = 2500 * time.Millisecond // longer than the 2 s threshold
	time.Sleep(window)
	sent := counter.Count() - before
	t.Logf("%d statements in %s", sent, window)
	require.NoError(t, holders.Release(ctx))
	require.Zero(t, holders.LeaseLosses())
	require.LessOrEqual(t, sent, int64(15), "statements in %s while 300 executions ran", window)
}

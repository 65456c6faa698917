package bench_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// TestKeyScenarios runs `make bench`'s key scenarios briefly at both isolation levels: keyed and
// unkeyed cycles, and starts among holders over few keys or a key each, never over a limit and
// never denied.
func TestKeyScenarios(t *testing.T) {
	ctx := context.Background()
	for _, iso := range isolations {
		for _, keys := range []int{0, 50} {
			pool, _ := pgtest.NewDB(t)
			res, err := bench.KeyedCycles(ctx, newClient(t, pool, iso, bench.KeyedSettings(10, 2)), "bench", 8, keys, 10, 2, short)
			require.NoError(t, err)
			require.Positive(t, res.Cycles)
			require.Zero(t, res.Violations, "over the task's or a key's limit, %d keys", keys)
			require.Zero(t, res.Failed)
		}
		for _, keys := range []int{8, 44} {
			pool, _ := pgtest.NewDB(t)
			client := newClient(t, pool, iso, bench.ActiveKeysSettings(4, 40, keys))
			res, err := bench.ActiveKeys(ctx, client, "bench", 4, 40, keys, short)
			require.NoError(t, err)
			require.Positive(t, res.Cycles)
			require.Len(t, res.Latencies, int(res.Cycles), "one acquire latency per cycle")
			require.Zero(t, res.Violations, "over the task's or a key's limit, %d keys", keys)
			require.Zero(t, res.Failed, "a key's limit leaves room for one more start")
		}
	}
}

// TestKeyedSweepFindsKeyOverLimit: the keyed scenario's check can fail. Its clients declare a key
// limit of 4 while the sweep judges by 1: grants of a key beyond 1 are counted.
func TestKeyedSweepFindsKeyOverLimit(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	res, err := bench.KeyedCycles(ctx, newClient(t, pool, taskling.IsolationReadCommitted, bench.KeyedSettings(10, 4)), "bench", 8, 2, 10, 1, short)
	require.NoError(t, err)
	require.Positive(t, res.Violations)
}

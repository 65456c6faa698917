package execution_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

// cycleOneTask runs a process per option set, each with goroutines starting and completing n
// executions of one task of limit 4, and returns each process's serialization retries and the
// most holders seen at once.
func cycleOneTask(t *testing.T, opts []execution.Options, goroutines, n int) (retries []int64, maxHolders int) {
	t.Helper()
	pool, url := pgtest.NewDB(t)
	var bundles []*testBundle
	for i := range opts {
		b := setupOn(t, pool, url, &opts[i])
		bundles = append(bundles, b)
	}
	var mu sync.Mutex
	holders := 0
	var wg sync.WaitGroup
	errs := make(chan error, len(opts)*goroutines)
	for _, b := range bundles {
		for range goroutines {
			wg.Go(func() {
				for range n {
					res, err := b.store.Acquire(b.ctx, b.request(4))
					if err == nil && res.Denied != execution.NotDenied {
						continue // every slot held: try again
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					holders++
					maxHolders = max(maxHolders, holders)
					mu.Unlock()
					time.Sleep(time.Millisecond) // hold it a moment
					mu.Lock()
					holders--
					mu.Unlock()
					if _, err := b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task",
						ExecutionID: res.ExecutionID, TokenID: res.TokenID}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, b := range bundles {
		retries = append(retries, b.store.Stats().SerializationRetries)
	}
	return retries, maxHolders
}

// TestProcessesOnOneTaskAreNotRetriedUnderSerializable is issue 25's retry storm: 4 processes ×
// 4 goroutines cycling on one task at SERIALIZABLE. Without the stripe locks, every transaction
// that waited for the task row's lock had taken its snapshot before the holder committed and
// failed when it did (about a retry for every five transactions); with them it waits before its
// snapshot, and is not retried.
func TestProcessesOnOneTaskAreNotRetriedUnderSerializable(t *testing.T) {
	t.Parallel()
	ser := execution.Options{Serializable: true}
	retries, _ := cycleOneTask(t, []execution.Options{ser, ser, ser, ser}, 4, 40)
	for i, r := range retries {
		require.Zero(t, r, "process %d retried", i)
	}
}

// TestAMixedFleetTakesTheSameStripes: processes at READ COMMITTED and at SERIALIZABLE on one task
// take the same stripe lock, so the serializable ones are not retried either, and the limit holds.
func TestAMixedFleetTakesTheSameStripes(t *testing.T) {
	t.Parallel()
	ser, rc := execution.Options{Serializable: true}, execution.Options{}
	retries, maxHolders := cycleOneTask(t, []execution.Options{ser, rc, ser, rc}, 4, 40)
	require.LessOrEqual(t, maxHolders, 4)
	for i, r := range retries {
		require.Zero(t, r, "process %d retried", i)
	}
}

// BenchmarkTasksSharingAStripe measures what sharing a stripe costs two unrelated tasks: two
// processes, each with 4 goroutines cycling on its own task, where the tasks' ids share a stripe
// or not (go test -run - -bench Stripe ./execution/).
func BenchmarkTasksSharingAStripe(b *testing.B) {
	for _, shared := range []bool{false, true} {
		for _, ser := range []bool{false, true} {
			b.Run(fmt.Sprintf("shared=%v/serializable=%v", shared, ser), func(b *testing.B) {
				pool, url := pgtest.NewDB(b)
				var bundles []*testBundle
				for range 2 {
					bundles = append(bundles, setupOn(b, pool, url, &execution.Options{Serializable: ser}))
				}
				ctx := context.Background()
				first, err := bundles[0].store.EnsureTask(ctx, "app", "a")
				require.NoError(b, err)
				second := first
				for i := 1; second == first || (second%64 == first%64) != shared; i++ {
					second, err = bundles[1].store.EnsureTask(ctx, "app", fmt.Sprintf("b%d", i))
					require.NoError(b, err)
				}
				bundles[0].taskID, bundles[1].taskID = first, second
				b.ResetTimer()
				var next atomic.Int64
				var wg sync.WaitGroup
				for _, t := range bundles {
					for range 4 {
						wg.Go(func() {
							for next.Add(1) <= int64(b.N) {
								res, err := t.store.Acquire(t.ctx, t.request(4))
								if err != nil || res.Denied != execution.NotDenied {
									continue
								}
								_, _ = t.store.Release(t.ctx, execution.ReleaseRequest{TaskID: t.taskID, TaskName: "app/task",
									ExecutionID: res.ExecutionID, TokenID: res.TokenID})
							}
						})
					}
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
			})
		}
	}
}

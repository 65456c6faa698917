package execution_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/testutil"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/pgtest"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	url    string
	store  *execution.Store
	taskID int64
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, url := pgtest.NewDB(t)
	b := &testBundle{ctx: context.Background(), pool: pool, url: url, store: execution.NewStore(pool, nil)}
	var err error
	b.taskID, err = b.store.EnsureTask(b.ctx, "app", "task")
	require.NoError(t, err)
	return b
}

func (b *testBundle) request(limit int) execution.AcquireRequest {
	return execution.AcquireRequest{
		TaskID: b.taskID, TaskName: "app/task", Host: "h", RecordDenial: true,
		Declared: execution.Settings{ConcurrencyLimit: limit, Enabled: true, DeathMode: 1,
			KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 10 * time.Second},
	}
}

func (b *testBundle) release(t *testing.T, res execution.AcquireResult) execution.ReleaseResult {
	t.Helper()
	rel, err := b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task", ExecutionID: res.ExecutionID, TokenID: res.TokenID})
	require.NoError(t, err)
	return rel
}

func TestConcurrentRequestsOfOneTaskAreCoalesced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const goroutines, cycles = 16, 30
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				res, err := b.store.Acquire(b.ctx, b.request(goroutines))
				if err == nil && res.Denied != execution.NotDenied {
					err = context.Canceled // a limit that admits everyone never denies
				}
				if err != nil {
					errs <- err
					return
				}
				if _, err := b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task", ExecutionID: res.ExecutionID, TokenID: res.TokenID}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := b.store.Stats()
	require.Equal(t, int64(2*goroutines*cycles), st.Operations)
	require.Less(t, st.Transactions, st.Operations, "queued requests share transactions")
	var fences, open int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(DISTINCT fence), count(*) FILTER (WHERE completed_at IS NULL) FROM taskling.task_execution`).Scan(&fences, &open))
	require.Equal(t, goroutines*cycles, fences, "every grant has its own fencing token")
	require.Zero(t, open)
}

func TestRequestCancelledWhileQueuedIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err := b.store.Acquire(ctx, b.request(1))
	require.ErrorIs(t, err, context.Canceled)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.task_execution`).Scan(&n))
	require.Zero(t, n, "a request whose context ended before its transaction writes nothing")
}

// listen returns a connection listening for slot notifications.
func (b *testBundle) listen(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(b.ctx, "LISTEN "+execution.NotifyChannelForTest)
	require.NoError(t, err)
	return conn
}

func notified(conn *pgx.Conn, within time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, err := conn.WaitForNotification(ctx)
	return err == nil
}

func TestReleaseNotifiesOnlyWhileSomeoneWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := b.listen(t)

	held, err := b.store.Acquire(b.ctx, b.request(1))
	require.NoError(t, err)
	b.release(t, held)
	require.False(t, notified(conn, 200*time.Millisecond), "nobody waits: no NOTIFY")

	held, err = b.store.Acquire(b.ctx, b.request(1))
	require.NoError(t, err)
	waiter := b.request(1)
	waiter.RecordDenial = false // an attempt of a wait loop
	res, err := b.store.Acquire(b.ctx, waiter)
	require.NoError(t, err)
	require.Equal(t, execution.DeniedLimit, res.Denied)
	require.Zero(t, res.ExecutionID, "a wait-loop attempt records no execution")
	b.release(t, held)
	require.True(t, notified(conn, 2*time.Second), "a waiter marked the task: the release notifies")
}

func TestReleaseIsIdentityChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.store.Acquire(b.ctx, b.request(1))
	require.NoError(t, err)
	// The first holder is reclaimed (here by hand: its row says it was).
	_, err = b.pool.Exec(b.ctx, `UPDATE taskling.task_execution SET last_keep_alive = last_keep_alive - interval '1 hour' WHERE id = $1`, first.ExecutionID)
	require.NoError(t, err)
	second, err := b.store.Acquire(b.ctx, b.request(1))
	require.NoError(t, err)
	require.Equal(t, execution.NotDenied, second.Denied)
	require.Equal(t, []int64{first.ExecutionID}, second.Reclaimed)

	rel := b.release(t, first)
	require.True(t, rel.LeaseLost)
	third, err := b.store.Acquire(b.ctx, b.request(1))
	require.NoError(t, err)
	require.Equal(t, execution.DeniedLimit, third.Denied, "the reclaimed holder's release did not free the new holder's slot")

	held, err := b.store.Heartbeat(b.ctx, first.ExecutionID)
	require.NoError(t, err)
	require.False(t, held, "a reclaimed execution cannot renew its lease")
	require.False(t, b.release(t, second).LeaseLost)
}

// Each acquisition reports the reclaims it made, even when several were served by one
// transaction: the metrics count them per acquisition.
func TestEachAcquisitionReportsOnlyItsOwnReclaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 16
	for range n {
		res, err := b.store.Acquire(b.ctx, b.request(n))
		require.NoError(t, err)
		require.Equal(t, execution.NotDenied, res.Denied)
	}
	// Every holder dies.
	_, err := b.pool.Exec(b.ctx, `UPDATE taskling.task_execution SET last_keep_alive = last_keep_alive - interval '1 hour'`)
	require.NoError(t, err)

	var wg sync.WaitGroup
	results := make([]execution.AcquireResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = b.store.Acquire(b.ctx, b.request(n))
		}()
	}
	wg.Wait()
	reported := map[int64]int{}
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, execution.NotDenied, results[i].Denied)
		for _, id := range results[i].Reclaimed {
			reported[id]++
		}
	}
	var inDB int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.task_execution WHERE reclaimed_at IS NOT NULL`).Scan(&inDB))
	require.Equal(t, n, inDB)
	require.Len(t, reported, n)
	for id, times := range reported {
		require.Equal(t, 1, times, "execution %d reported as reclaimed by %d acquisitions", id, times)
	}
}

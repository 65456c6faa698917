package execution_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

// keyedCycle has processes (one store each, on a task each or all on one) whose goroutines wait
// for slots of random keys and costs (queued: their tickets and keys' rows are written), hold
// them a moment and release them, and reports the processes' serialization retries and the most
// cost held at once, in all and per key and task.
func keyedCycle(t *testing.T, opts []execution.Options, oneTask bool, goroutines, n int) (retries []int64, most map[string]int) {
	t.Helper()
	pool, url := pgtest.NewDB(t)
	var bundles []*testBundle
	for i := range opts {
		b := setupOn(t, pool, url, &opts[i])
		if !oneTask {
			var err error
			for j := 0; ; j++ { // tasks on stripes of their own
				b.taskID, err = b.store.EnsureTask(b.ctx, "app", fmt.Sprintf("task%d-%d", i, j))
				require.NoError(t, err)
				if int(b.taskID%64) == 10+i {
					break
				}
			}
		}
		bundles = append(bundles, b)
	}
	var mu sync.Mutex
	held := map[string]int{}
	most = map[string]int{}
	hold := func(task int64, key string, cost int) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []string{fmt.Sprint(task), fmt.Sprint(task, "/", key)} {
			held[k] += cost
			most[k] = max(most[k], held[k])
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(opts)*goroutines)
	for _, b := range bundles {
		for range goroutines {
			wg.Go(func() {
				for range n {
					key, cost := fmt.Sprint(rand.IntN(5)), 1+rand.IntN(2)
					req := b.request(4)
					req.Declared.KeyLimit, req.Key, req.Cost, req.RecordDenial = 2, key, cost, false
					req.Queue = &execution.Queue{OfferWindow: time.Second}
					res, err := b.store.Acquire(b.ctx, req)
					for err == nil && res.Denied != execution.NotDenied {
						time.Sleep(time.Millisecond)
						req.Queue.Ticket = res.Ticket
						res, err = b.store.Acquire(b.ctx, req)
					}
					if err != nil {
						errs <- err
						return
					}
					hold(b.taskID, key, cost)
					time.Sleep(time.Millisecond)
					hold(b.taskID, key, -cost)
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
	return retries, most
}

func requireKeyedLimits(t *testing.T, most map[string]int) {
	t.Helper()
	require.NotEmpty(t, most)
	for k, n := range most {
		limit := 2 // a key's
		if !containsSlash(k) {
			limit = 4 // a task's
		}
		require.LessOrEqual(t, n, limit, "%s held %d at once", k, n)
	}
}

func containsSlash(s string) bool { return strings.Contains(s, "/") }

// TestKeyedTasksDoNotAbortEachOtherUnderSerializable is rule 4's last sentence: processes on
// tasks of different stripes write tickets and keys' rows at once, at SERIALIZABLE, and they are
// almost never retried (the tables are partitioned by stripe: they share no index page).
func TestKeyedTasksDoNotAbortEachOtherUnderSerializable(t *testing.T) {
	t.Parallel()
	ser := execution.Options{Serializable: true}
	retries, most := keyedCycle(t, []execution.Options{ser, ser, ser}, false, 4, 25)
	requireKeyedLimits(t, most)
	// Not zero: in about one run in six to twenty-five, one or two of the 300 cycles were retried
	// (40001, a pivot found at a write) — a conflict not yet located; the key tables' predicate
	// locks stay in their stripes' partitions. Bounded like the bench's retries (< 1 %).
	total := int64(0)
	for _, r := range retries {
		total += r
	}
	t.Logf("retries by process: %v", retries)
	require.LessOrEqual(t, total, int64(3), "retries by process %v of 300 cycles", retries)
}

// TestKeyedProcessesOnOneTaskKeepEveryLimitAtBothLevels: processes at each isolation level wait for
// keyed slots of one task together: no limit is exceeded, and the serializable ones are not
// retried (the stripe lock makes them wait before their snapshots).
func TestKeyedProcessesOnOneTaskKeepEveryLimitAtBothLevels(t *testing.T) {
	t.Parallel()
	ser, rc := execution.Options{Serializable: true}, execution.Options{}
	retries, most := keyedCycle(t, []execution.Options{ser, rc, ser, rc}, true, 3, 20)
	requireKeyedLimits(t, most)
	for i, r := range retries {
		require.Zero(t, r, "process %d retried", i)
	}
}

// TestKeyedTicketsLeftByALiveSessionDoNotHoldTheirKey: waiters of a live session queue on a full
// key and give up without leaving (as when their leave fails while the database restarts). Once
// the key has room, the waiters that come after, each patient for less than the tickets left
// behind take to be offered one by one, are still granted: a ticket whose offer lapses goes, where
// it was once requeued for ever at the back of its key, ahead of every later waiter.
func TestKeyedTicketsLeftByALiveSessionDoNotHoldTheirKey(t *testing.T) {
	t.Parallel()
	for _, serializable := range []bool{false, true} {
		t.Run(fmt.Sprint("serializable=", serializable), func(t *testing.T) {
			t.Parallel()
			abandonedKeyTickets(t, execution.Options{Serializable: serializable})
		})
	}
}

func abandonedKeyTickets(t *testing.T, opts execution.Options) {
	pool, url := pgtest.NewDB(t)
	gone, live := setupOn(t, pool, url, &opts), setupOn(t, pool, url, &opts)
	const window = 200 * time.Millisecond
	keyed := func(b *testBundle) execution.AcquireRequest {
		req := b.request(2)
		req.Declared.KeyLimit, req.Key, req.RecordDenial = 2, "hot", false
		return req
	}
	var holders []execution.AcquireResult
	for range 2 {
		res, err := live.store.Acquire(live.ctx, keyed(live))
		require.NoError(t, err)
		require.Equal(t, execution.NotDenied, res.Denied)
		holders = append(holders, res)
	}
	for range 6 { // the key is full: each queues a ticket, and its waiter never comes back
		req := keyed(gone)
		req.Queue = &execution.Queue{OfferWindow: window}
		res, err := gone.store.Acquire(gone.ctx, req)
		require.NoError(t, err)
		require.NotZero(t, res.Ticket)
	}
	for _, h := range holders {
		live.release(t, h)
	}
	granted := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); { // well within the session's threshold
		req := keyed(live)
		req.Queue = &execution.Queue{OfferWindow: window}
		for patience := time.Now().Add(3 * window / 2); ; time.Sleep(10 * time.Millisecond) {
			res, err := live.store.Acquire(live.ctx, req)
			require.NoError(t, err)
			if res.Denied == execution.NotDenied {
				granted++
				live.release(t, res)
				break
			}
			req.Queue.Ticket = res.Ticket
			if time.Now().After(patience) {
				require.NoError(t, live.store.Leave(live.ctx, execution.LeaveRequest{Requester: req.Requester, Ticket: res.Ticket}))
				break
			}
		}
	}
	var left int
	require.NoError(t, pool.QueryRow(live.ctx, `SELECT count(*) FROM taskling.key_ticket WHERE session_id = $1`, gone.session).Scan(&left))
	require.Zero(t, left, "tickets left behind still queued (waiters granted: %d)", granted)
	require.Greater(t, granted, 3, "waiters granted after the tickets left behind")
	t.Logf("waiters granted: %d", granted)
}

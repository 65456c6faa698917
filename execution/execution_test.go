package execution_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/testutil"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

type testBundle struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	url     string
	store   *execution.Store
	taskID  int64
	session int64
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, url := pgtest.NewDB(t)
	return setupOn(t, pool, url, nil)
}

// setupOn makes a store (a process) with a session of its own on pool.
func setupOn(t testing.TB, pool *pgxpool.Pool, url string, opts *execution.Options) *testBundle {
	t.Helper()
	b := &testBundle{ctx: context.Background(), pool: pool, url: url, store: execution.NewStore(pool, opts)}
	var err error
	b.taskID, err = b.store.EnsureTask(b.ctx, "app", "task")
	require.NoError(t, err)
	b.session, err = b.store.RegisterSession(b.ctx, "h")
	require.NoError(t, err)
	return b
}

func (b *testBundle) request(limit int) execution.AcquireRequest {
	return execution.AcquireRequest{
		Requester: execution.Requester{TaskID: b.taskID, TaskName: "app/task", Host: "h", SessionID: b.session,
			Declared: execution.Settings{ConcurrencyLimit: limit, Enabled: true, DeathMode: 1,
				KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 10 * time.Second}},
		RecordDenial: true,
	}
}

func (b *testBundle) acquire(t *testing.T, limit int) execution.AcquireResult {
	t.Helper()
	res, err := b.store.Acquire(b.ctx, b.request(limit))
	require.NoError(t, err)
	require.Equal(t, execution.NotDenied, res.Denied)
	return res
}

func (b *testBundle) release(t *testing.T, res execution.AcquireResult) execution.ReleaseResult {
	t.Helper()
	rel, err := b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task", ExecutionID: res.ExecutionID, TokenID: res.TokenID})
	require.NoError(t, err)
	return rel
}

// freeze makes every holder of the bundle's session dead: its last heartbeat and their grant
// times an hour ago, as if its process had frozen then.
func (b *testBundle) freeze(t *testing.T) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE taskling.session SET last_heartbeat = last_heartbeat - interval '1 hour' WHERE id = $1`, b.session)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE taskling.task_definition SET holders = regexp_replace(holders, 'A:[0-9]+', 'A:0', 'g')`)
	require.NoError(t, err)
}

// concurrently runs f(0) … f(n-1) at once and requires that none failed.
func concurrently(t *testing.T, n int, f func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Go(func() {
			if err := f(g); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestConcurrentRequestsOfOneTaskAreCoalesced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const goroutines, cycles = 16, 30
	concurrently(t, goroutines, func(int) error {
		for range cycles {
			res, err := b.store.Acquire(b.ctx, b.request(goroutines))
			if err == nil && res.Denied != execution.NotDenied {
				err = context.Canceled // a limit that admits everyone never denies
			}
			if err != nil {
				return err
			}
			if _, err := b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task", ExecutionID: res.ExecutionID, TokenID: res.TokenID}); err != nil {
				return err
			}
		}
		return nil
	})
	st := b.store.Stats()
	require.Equal(t, int64(2*goroutines*cycles), st.Operations)
	require.Less(t, st.Transactions, st.Operations, "queued requests share transactions")
	var fences, open int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(DISTINCT fence), count(*) FILTER (WHERE x.execution_id IS NULL)
FROM taskling.task_execution e LEFT JOIN taskling.execution_end x ON x.execution_id = e.id`).Scan(&fences, &open))
	require.Equal(t, goroutines*cycles, fences, "every grant has its own fencing token")
	require.Zero(t, open)
}

// TestCombinedReleasesMarkOnlySucceededClaims: idempotent starts and releases of one task,
// concurrent so that the combiner serves several in one transaction, between plain ones that take
// the fast path. A claim is marked succeeded exactly when its execution's release completed it; a
// failed release leaves it unsucceeded, whatever shares its transaction.
func TestCombinedReleasesMarkOnlySucceededClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const goroutines, cycles = 8, 20
	concurrently(t, goroutines, func(g int) error {
		for i := range cycles {
			req := b.request(-1)
			ref := fmt.Sprintf("r-%d-%d", g, i)
			if i%3 != 2 { // every third cycle is a plain one (the fast path, once the row is cached)
				req.ReferenceValue, req.Idempotent = &ref, true
			}
			res, err := b.store.Acquire(b.ctx, req)
			if err == nil && res.Denied != execution.NotDenied {
				err = fmt.Errorf("%s denied: %d", ref, res.Denied)
			}
			if err == nil {
				_, err = b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task", ExecutionID: res.ExecutionID,
					TokenID: res.TokenID, Failed: i%2 == 0, ReferenceValue: req.ReferenceValue, Idempotent: req.Idempotent})
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	st := b.store.Stats()
	require.Less(t, st.Transactions, st.Operations, "queued requests share transactions")
	var claims, wrong int
	require.NoError(t, b.pool.QueryRow(b.ctx, `
SELECT count(*), count(*) FILTER (WHERE c.succeeded IS DISTINCT FROM (x.outcome = 1))
FROM taskling.reference_claim c JOIN taskling.execution_end x ON x.execution_id = c.execution_id`).Scan(&claims, &wrong))
	require.Equal(t, goroutines*(cycles-cycles/3), claims)
	require.Zero(t, wrong, "a claim is succeeded exactly when its execution completed")
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
	// The first holder's process freezes; another process takes its slot.
	b.freeze(t)
	other := setupOn(t, b.pool, b.url, nil)
	second, err := other.store.Acquire(b.ctx, other.request(1))
	require.NoError(t, err)
	require.Equal(t, execution.NotDenied, second.Denied)
	require.Equal(t, []int64{first.ExecutionID}, second.Reclaimed)

	lost, _, renewed, err := b.store.Heartbeat(b.ctx, b.session, []int64{first.ExecutionID}, nil)
	require.NoError(t, err)
	require.True(t, renewed)
	require.Equal(t, map[int64]execution.Lost{first.ExecutionID: execution.Reclaimed}, lost, "a reclaimed execution learns it at its next heartbeat")

	rel := b.release(t, first)
	require.True(t, rel.LeaseLost)
	third, err := b.store.Acquire(b.ctx, b.request(1))
	require.NoError(t, err)
	require.Equal(t, execution.DeniedLimit, third.Denied, "the reclaimed holder's release did not free the new holder's slot")
	require.False(t, other.release(t, second).LeaseLost)
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
	// Every holder dies; another process takes the slots.
	b.freeze(t)
	b2 := setupOn(t, b.pool, b.url, nil)

	var wg sync.WaitGroup
	results := make([]execution.AcquireResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = b2.store.Acquire(b.ctx, b2.request(n))
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
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.execution_end WHERE outcome = 3`).Scan(&inDB))
	require.Equal(t, n, inDB)
	require.Len(t, reported, n)
	for id, times := range reported {
		require.Equal(t, 1, times, "execution %d reported as reclaimed by %d acquisitions", id, times)
	}
}

// TestUnrelatedTasksNeverAbortEachOtherUnderSerializable: two processes cycle through their own
// tasks at SERIALIZABLE at the same time; a token transaction reads only its own task's rows (and
// sessions, which only heartbeats write), so they do not conflict. (Before protocol 2 they read
// holders and references through index pages every task's inserts touch, and conflicted.) Of
// each process's ~240 transactions at most one may be retried: 2 runs of make test in 6 saw
// exactly one, whose cause is not established (PostgreSQL's predicate locks may cover more than
// the rows read: a page once a transaction reads more than two of its rows, an index page).
//
// The task table is analyzed first, as autovacuum does during a long run: with statistics that
// say it is small, the planner scanned every task's row where a statement joined its task ids
// (the fast path's written-row checks, the update of the rows, the sessions' read), so unrelated
// tasks conflicted — this test then failed now and then on a loaded machine (3 runs in 40), and
// every time after an ANALYZE. Each statement now names its task ids as an index condition.
func TestUnrelatedTasksNeverAbortEachOtherUnderSerializable(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	var bundles []*testBundle
	for i := range 2 {
		b := setupOn(t, pool, url, &execution.Options{Serializable: true})
		var err error
		b.taskID, err = b.store.EnsureTask(b.ctx, "app", fmt.Sprintf("task-%d", i))
		require.NoError(t, err)
		bundles = append(bundles, b)
	}
	_, err := pool.Exec(context.Background(), `ANALYZE taskling.task_definition`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, b := range bundles {
		for range 4 {
			wg.Go(func() {
				for range 60 {
					res, err := b.store.Acquire(b.ctx, b.request(4))
					if err == nil && res.Denied != execution.NotDenied {
						err = fmt.Errorf("denied: %v", res.Denied)
					}
					if err == nil {
						_, err = b.store.Release(b.ctx, execution.ReleaseRequest{TaskID: b.taskID, TaskName: "app/task", ExecutionID: res.ExecutionID, TokenID: res.TokenID})
					}
					if err != nil {
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
	for i, b := range bundles {
		st := b.store.Stats()
		t.Logf("process %d: %d transactions, %d retried", i, st.Transactions, st.SerializationRetries)
		require.LessOrEqual(t, st.SerializationRetries, int64(1), "process %d retried", i)
		require.Positive(t, st.Transactions)
	}
}

// TestEveryGrantReachesItsRequester: processes fill tasks' slots concurrently under SERIALIZABLE,
// where transactions on the fast path lose their compare-and-swap and others are retried. Each
// grant written must be the answer of exactly one request; found by the heartbeat benchmark, where
// requests served on the fast path were served again by a retried transaction, and the first grant
// — alive on its process's heartbeats, known to nobody — held its slot for good.
func TestEveryGrantReachesItsRequester(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	const processes, goroutines, tasks, limit = 3, 16, 6, 45
	var mu sync.Mutex
	returned := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, processes*goroutines)
	for range processes {
		b := setupOn(t, pool, url, &execution.Options{Serializable: true})
		ids := make([]int64, tasks)
		for i := range ids {
			var err error
			ids[i], err = b.store.EnsureTask(b.ctx, "app", fmt.Sprintf("task-%d", i))
			require.NoError(t, err)
		}
		for g := range goroutines {
			wg.Go(func() {
				for i := g; i < tasks*limit/processes; i += goroutines {
					req := b.request(limit)
					req.TaskID = ids[i%tasks]
					res, err := b.store.Acquire(b.ctx, req)
					if err == nil && res.Denied != execution.NotDenied {
						err = fmt.Errorf("denied: %v", res.Denied)
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					returned[res.ExecutionID] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rows, err := pool.Query(context.Background(), `SELECT id FROM taskling.task_execution WHERE NOT blocked`)
	require.NoError(t, err)
	granted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, granted, tasks*limit)
	for _, id := range granted {
		require.True(t, returned[id], "execution %d was granted but reached no requester", id)
	}
}

// TestBatchedHeartbeatDetectsAReclaimedExecutionAndOnlyIt: one heartbeat renews a process's
// executions of two tasks; the one another process reclaimed meanwhile is reported lost, the
// other lives on.
func TestBatchedHeartbeatDetectsAReclaimedExecutionAndOnlyIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, err := b.store.EnsureTask(b.ctx, "app", "other")
	require.NoError(t, err)
	e1, err := b.store.Acquire(b.ctx, b.request(1))
	require.NoError(t, err)
	r2 := b.request(1)
	r2.TaskID, r2.TaskName = other, "app/other"
	e2, err := b.store.Acquire(b.ctx, r2)
	require.NoError(t, err)
	lost, _, renewed, err := b.store.Heartbeat(b.ctx, b.session, []int64{e1.ExecutionID, e2.ExecutionID}, nil)
	require.NoError(t, err)
	require.True(t, renewed)
	require.Empty(t, lost)

	b.freeze(t) // the process stalls past the threshold: both are dead on the DB clock
	thief := setupOn(t, b.pool, b.url, nil)
	taken, err := thief.store.Acquire(b.ctx, thief.request(1)) // only app/task is requested
	require.NoError(t, err)
	require.Equal(t, []int64{e1.ExecutionID}, taken.Reclaimed)

	lost, _, renewed, err = b.store.Heartbeat(b.ctx, b.session, []int64{e1.ExecutionID, e2.ExecutionID}, nil)
	require.NoError(t, err)
	require.True(t, renewed)
	require.Equal(t, map[int64]execution.Lost{e1.ExecutionID: execution.Reclaimed}, lost)
	again, err := thief.store.Acquire(b.ctx, execution.AcquireRequest{Requester: execution.Requester{TaskID: other, TaskName: "app/other",
		Host: "h", SessionID: thief.session, Declared: r2.Declared}, RecordDenial: true})
	require.NoError(t, err)
	require.Equal(t, execution.DeniedLimit, again.Denied, "the heartbeat renewed the unreclaimed one")
}

// TestGrantsOfProtocol1AreJudgedByTheirRows: a token granted before protocol 2 has no liveness
// terms; its holder is judged by its own row (heartbeat column), and reclaimed through it.
func TestGrantsOfProtocol1AreJudgedByTheirRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insert := func(id int64, age string) {
		_, err := b.pool.Exec(b.ctx, `INSERT INTO taskling.task_execution (id, task_id, started_at, last_keep_alive, host_name,
death_mode, keep_alive_interval, keep_alive_death_threshold, token_id, fence, library_version)
VALUES ($1, $2, now() - $3::interval, now() - $3::interval, 'old-host', 1, '1 second', '10 seconds', gen_random_uuid(), $1, '0.1.0')`, id, b.taskID, age)
		require.NoError(t, err)
	}
	insert(900001, "1 hour")
	insert(900002, "1 second")
	_, err := b.pool.Exec(b.ctx, `UPDATE taskling.task_definition SET tokens = $2 WHERE id = $1`, b.taskID,
		"I:6f1c0f4e-8d0a-4c55-9d43-0c8a1b0e2f11,S:0,G:900001|I:6f1c0f4e-8d0a-4c55-9d43-0c8a1b0e2f12,S:0,G:900002")
	require.NoError(t, err)
	res, err := b.store.Acquire(b.ctx, b.request(2))
	require.NoError(t, err)
	require.Equal(t, execution.NotDenied, res.Denied)
	require.Equal(t, []int64{900001}, res.Reclaimed)
	var reclaimed bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT reclaimed_at IS NOT NULL FROM taskling.task_execution WHERE id = 900001`).Scan(&reclaimed))
	require.True(t, reclaimed, "a heartbeat of the old binary now fails its identity check")
	res, err = b.store.Acquire(b.ctx, b.request(2))
	require.NoError(t, err)
	require.Equal(t, execution.DeniedLimit, res.Denied, "the live old holder keeps its slot")
}

// cutConn is a connection whose answers can be lost: once armed, the next write reaches the
// server, and every read after it fails, as when the network drops between a COMMIT and its answer.
type cutConn struct {
	net.Conn
	armed  *atomic.Bool
	broken atomic.Bool
}

func (c *cutConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.armed.CompareAndSwap(true, false) {
		c.broken.Store(true)
	}
	return n, err
}

func (c *cutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.broken.Load() {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("simulated loss of the connection")}
	}
	return n, err
}

// TestAGrantWhoseCommitAnswerIsLostIsGivenBack: the answer to a committed grant is lost. Nobody
// knows of that execution, and its session's heartbeats would keep it alive for good: the process
// gives it back at once.
func TestAGrantWhoseCommitAnswerIsLostIsGivenBack(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	var armed atomic.Bool
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: c, armed: &armed}, nil
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := setupOn(t, pool, url, nil)
	for range 2 { // the process knows the task row, the fast path's statements are prepared
		b.release(t, b.acquire(t, 1))
	}

	armed.Store(true)
	res, err := b.store.Acquire(b.ctx, b.request(1))
	var known int64
	if err == nil && res.Denied == execution.NotDenied {
		known = res.ExecutionID
	}
	require.Eventually(t, func() bool {
		var open int
		require.NoError(t, pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.task_execution e
WHERE NOT e.blocked AND e.id <> $1 AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)`, known).Scan(&open))
		return open == 0
	}, 3*time.Second, 20*time.Millisecond, "the grant nobody got back is given back, long before its threshold (10 s)")
	if known != 0 {
		b.release(t, res)
	}
	b.release(t, b.acquire(t, 1))
}

// TestAHeartbeatReportsACancelWithTheOperatorsReason: the heartbeat that finds a run's submission
// cancelled says why, in the same round trip, so the run is told the reason whichever of the
// heartbeat and the cancel watcher sees the cancel first.
func TestAHeartbeatReportsACancelWithTheOperatorsReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	quiet, err := b.store.Acquire(b.ctx, b.request(2))
	require.NoError(t, err)
	run, err := b.store.Acquire(b.ctx, b.request(2))
	require.NoError(t, err)
	var task int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT task_id FROM taskling.task_execution WHERE id = $1`, run.ExecutionID).Scan(&task))
	const reason = `operator said "so", it's \ done — ünïcode`
	_, err = b.pool.Exec(b.ctx, `INSERT INTO taskling.submission (task_id, max_attempts, status, execution_id, cancel_requested_at, cancel_reason)
        VALUES ($1, 1, $2, $3, clock_timestamp(), $5), ($1, 1, $2, $4, clock_timestamp(), NULL)`,
		task, codes.SubmissionInProgress, run.ExecutionID, quiet.ExecutionID, reason)
	require.NoError(t, err)

	runs := []int64{run.ExecutionID, quiet.ExecutionID}
	lost, reasons, renewed, err := b.store.Heartbeat(b.ctx, b.session, runs, runs)
	require.NoError(t, err)
	require.True(t, renewed)
	require.Equal(t, map[int64]execution.Lost{run.ExecutionID: execution.CancelRequested, quiet.ExecutionID: execution.CancelRequested}, lost)
	require.Equal(t, map[int64]string{run.ExecutionID: reason, quiet.ExecutionID: ""}, reasons, "read back exactly")
}

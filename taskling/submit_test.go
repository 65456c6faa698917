package taskling_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// work runs Work on c for b's task in the background until the test ends.
func (b *testBundle) work(t *testing.T, c *taskling.Client, fn func(context.Context, *taskling.Execution) error, opts *taskling.WorkOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Work(ctx, b.app, b.task, fn, opts) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func (b *testBundle) waitStatus(t *testing.T, id int64, want taskling.SubmissionStatus) taskling.Submission {
	t.Helper()
	var sub taskling.Submission
	require.Eventually(t, func() bool {
		var err error
		sub, err = b.client.Submission(b.ctx, id)
		require.NoError(t, err)
		return sub.Status == want
	}, 15*time.Second, 10*time.Millisecond, "submission %d to become %s", id, want)
	return sub
}

func TestSubmissionRunsOnceWithItsHeaderAndProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Header: map[string]int{"n": 7}})
	require.NoError(t, err)
	sub, err := b.client.Submission(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionWaiting, sub.Status)
	require.Equal(t, 1, sub.Position)
	require.Equal(t, taskling.DefaultMaxAttempts, sub.MaxAttempts)

	var runs atomic.Int32
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		runs.Add(1)
		var h map[string]int
		if err := e.Header(&h); err != nil || h["n"] != 7 || e.SubmissionID() != id || e.Attempt() != 1 {
			return fmt.Errorf("header %v (%v), submission %d, attempt %d", h, err, e.SubmissionID(), e.Attempt())
		}
		return e.SetProgress(ctx, 3, 4)
	}, nil)
	sub = b.waitStatus(t, id, taskling.SubmissionCompleted)
	require.Equal(t, 1, sub.Attempts)
	require.Equal(t, int64(3), sub.ItemsDone)
	require.Equal(t, int64(4), sub.ItemsTotal)
	require.NotNil(t, sub.FinishedAt)
	require.Empty(t, sub.LastError)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, int32(1), runs.Load(), "a completed submission never runs again")
	attempts, err := b.client.SubmissionAttempts(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, []int64{sub.ExecutionID}, attempts)
	info, err := b.client.LastExecutions(b.ctx, b.app, b.task, 1)
	require.NoError(t, err)
	require.Equal(t, taskling.StatusCompleted, info[0].Status)
}

func TestDuplicateReferenceReturnsTheSameSubmission(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{ReferenceValue: "upload-1"})
			require.NoError(t, err)
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.submission`))
	other, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{ReferenceValue: "upload-2"})
	require.NoError(t, err)
	require.NotEqual(t, ids[0], other)
}

func TestSubmitTxExistsOnlyIfTheTransactionCommits(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	ran := make(chan int64, 4)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		ran <- e.SubmissionID()
		return nil
	}, nil)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	rolledBack, err := b.client.SubmitTx(b.ctx, tx, b.app, b.task, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	_, err = b.client.Submission(b.ctx, rolledBack)
	require.ErrorIs(t, err, taskling.ErrNotFound)

	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	committed, err := b.client.SubmitTx(b.ctx, tx, b.app, b.task, nil)
	require.NoError(t, err)
	select {
	case id := <-ran:
		t.Fatalf("submission %d ran before its transaction committed", id)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, committed, <-ran)
	b.waitStatus(t, committed, taskling.SubmissionCompleted)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.submission`))
}

func TestFailingSubmissionIsRetriedThenDead(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{MaxAttempts: 3})
	require.NoError(t, err)
	var runs atomic.Int32
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		n := runs.Add(1)
		if int(n) != e.Attempt() {
			return fmt.Errorf("run %d is attempt %d", n, e.Attempt())
		}
		if n == 2 {
			panic("boom")
		}
		return fmt.Errorf("attempt %d failed", n)
	}, nil)
	sub := b.waitStatus(t, id, taskling.SubmissionDead)
	require.Equal(t, 3, sub.Attempts)
	require.Equal(t, "attempt 3 failed", sub.LastError)
	require.Equal(t, int32(3), runs.Load())
	attempts, err := b.client.SubmissionAttempts(b.ctx, id)
	require.NoError(t, err)
	require.Len(t, attempts, 3)
	for _, exec := range attempts {
		d, err := b.client.Execution(b.ctx, exec)
		require.NoError(t, err)
		require.Equal(t, taskling.StatusFailed, d.Status)
	}
}

// TestSubmissionAttemptMarkedFailedIsRetried: a run that marks its execution failed
// (RecordError(…, true)) and returns nil is a failed attempt like one that returns an error: its
// execution ends failed, the submission goes back to waiting with the recorded message as its
// LastError, and runs again. (Before issue 22 item 3 it was completed by that attempt.)
func TestSubmissionAttemptMarkedFailedIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{MaxAttempts: 3})
	require.NoError(t, err)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		if e.Attempt() == 1 {
			return e.RecordError(ctx, "row 7 is malformed", true)
		}
		return e.RecordError(ctx, "row 9 looked odd", false) // recorded, not a failure
	}, nil)
	sub := b.waitStatus(t, id, taskling.SubmissionCompleted)
	require.Equal(t, 2, sub.Attempts)
	require.Equal(t, "row 7 is malformed", sub.LastError, "the failed attempt's message")
	attempts, err := b.client.SubmissionAttempts(b.ctx, id)
	require.NoError(t, err)
	require.Len(t, attempts, 2)
	require.Equal(t, taskling.StatusFailed, b.statusOf(t, attempts[0]))
	require.Equal(t, taskling.StatusCompleted, b.statusOf(t, attempts[1]))
}

// A worker's end goes on in the background while it takes its next submission, but its next run
// is granted only after that end: in its transaction or a later one. So a Work call never holds
// more slots than it has workers, even when the task's limit would allow more, and even when an
// end writes something before its release (a failed run records its error first).
func TestAWorkersNextRunIsGrantedAfterItsLastEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(10))
	const workers, n = 2, 80
	ids := make([]int64, n)
	for i := range ids {
		id, err := b.client.Submit(b.ctx, b.app, b.task, nil)
		require.NoError(t, err)
		ids[i] = id
	}
	var most atomic.Int64
	var readErr atomic.Pointer[error]
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		var open int64
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM taskling.task_execution x
			WHERE x.id IN (SELECT execution_id FROM taskling.submission_attempt)
			  AND NOT EXISTS (SELECT 1 FROM taskling.execution_end n WHERE n.execution_id = x.id)`).Scan(&open)
		if err != nil {
			readErr.CompareAndSwap(nil, &err)
			return err
		}
		for m := most.Load(); open > m && !most.CompareAndSwap(m, open); m = most.Load() {
		}
		if e.Attempt() == 1 {
			// A failed end records its error first: a round trip before its release is queued.
			return errors.New("first attempts fail")
		}
		return nil
	}, &taskling.WorkOptions{Workers: workers})
	for _, id := range ids {
		b.waitStatus(t, id, taskling.SubmissionCompleted)
	}
	require.Nil(t, readErr.Load())
	require.LessOrEqual(t, most.Load(), int64(workers), "executions not ended while a run began")
	require.Positive(t, most.Load())
}

// A Work call whose workers queue for its claims claims a few submissions ahead of them. Those no
// worker of it takes within about 100 ms are given back, and so is what is left when the call
// stops; giving them back wakes the idle workers of other hosts at once (their poll is 30 s here,
// and a claim would live 30 s).
func TestSubmissionsClaimedAheadAreGivenBackToIdleHosts(t *testing.T) {
	t.Parallel()
	slow := taskling.TaskSettings{ConcurrencyLimit: 10, KeepAliveInterval: 10 * time.Second, KeepAliveDeathThreshold: 30 * time.Second}
	b := setup(t, &taskling.Config{Defaults: slow, MaxPollInterval: 30 * time.Second})
	submit := func(n int) {
		for range n {
			_, err := b.client.Submit(b.ctx, b.app, b.task, nil)
			require.NoError(t, err)
		}
	}
	submit(4)
	buffer, err := b.client.NewClaimBufferForTest(b.ctx, b.app, b.task, 3)
	require.NoError(t, err)
	kept, err := buffer.Take(b.ctx) // claims 1 + 3 ahead
	require.NoError(t, err)
	require.NotZero(t, kept)
	claimed := func() (n int) {
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.submission WHERE claimed_by IS NOT NULL`).Scan(&n))
		return n
	}
	require.Equal(t, 4, claimed())

	var mu sync.Mutex
	ran := map[int64]bool{}
	other := newClient(t, b.pool, &taskling.Config{Defaults: slow, MaxPollInterval: 30 * time.Second})
	b.work(t, other, func(ctx context.Context, e *taskling.Execution) error {
		mu.Lock()
		defer mu.Unlock()
		ran[e.SubmissionID()] = true
		return nil
	}, &taskling.WorkOptions{Workers: 1})
	ranCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ran)
	}
	time.Sleep(300 * time.Millisecond) // the other host found nothing to claim and sleeps
	require.Zero(t, ranCount())

	// The call stops: what it claimed ahead goes back at once.
	stopped, stop := context.WithCancel(b.ctx)
	stop()
	buffer.Expire(stopped)
	require.Eventually(t, func() bool { return ranCount() == 3 }, 5*time.Second, 10*time.Millisecond)

	// Claimed ahead and not taken: back after about 100 ms. (The other host, woken by the
	// submits, may claim some first; of 8, the buffer still claims 1 and 3 ahead.)
	submit(8)
	kept2, err := buffer.Take(b.ctx)
	require.NoError(t, err)
	require.NotZero(t, kept2)
	expiring, stopExpiring := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); buffer.Expire(expiring) }()
	t.Cleanup(func() { stopExpiring(); <-done })
	require.Eventually(t, func() bool { return ranCount() == 3+7 }, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.False(t, ran[kept] || ran[kept2], "the submissions taken stay claimed")
}

// Submissions claimed ahead whose key a rate then defers are given back when a worker next takes
// one, not started to be refused one after another.
func TestClaimedSubmissionsOfADeferredKeyAreGivenBack(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(10))
	for _, key := range []string{"a", "b", "a", "b"} {
		_, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: key})
		require.NoError(t, err)
	}
	buffer, err := b.client.NewClaimBufferForTest(b.ctx, b.app, b.task, 3)
	require.NoError(t, err)
	first, err := buffer.Take(b.ctx) // claims all four
	require.NoError(t, err)
	var firstKey string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT key FROM taskling.submission WHERE id = $1`, first).Scan(&firstKey))
	buffer.DeferKeyForTest(firstKey, time.Minute)

	next, err := buffer.Take(b.ctx)
	require.NoError(t, err)
	var nextKey string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT key FROM taskling.submission WHERE id = $1`, next).Scan(&nextKey))
	require.NotEqual(t, firstKey, nextKey, "a submission of the deferred key was taken")
	var claimedOfKey int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.submission WHERE key = $1 AND claimed_by IS NOT NULL`,
		firstKey).Scan(&claimedOfKey))
	require.Equal(t, 1, claimedOfKey, "only the one taken first stays claimed")
}

func TestSubmissionsRunInPriorityThenAgeOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	var ids []int64
	for _, p := range []int{0, 0, 5, 0, 5} {
		id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Priority: p})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	sub, err := b.client.Submission(b.ctx, ids[3])
	require.NoError(t, err)
	require.Equal(t, 5, sub.Position, "two of priority 5 and two older ones are ahead")
	waiting, err := b.client.Submissions(b.ctx, b.app, b.task, &taskling.SubmissionFilter{Status: taskling.SubmissionWaiting})
	require.NoError(t, err)
	require.Len(t, waiting, 5)
	require.Equal(t, ids[2], waiting[0].ID)

	var mu sync.Mutex
	var order []int64
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, e.SubmissionID())
		return nil
	}, &taskling.WorkOptions{Workers: 1})
	b.waitStatus(t, ids[3], taskling.SubmissionCompleted)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{ids[2], ids[4], ids[0], ids[1], ids[3]}, order)
}

func TestCancelWaitingAndRunningSubmissions(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	running, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	started := make(chan struct{})
	cause := make(chan error, 1)
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return context.Cause(ctx)
	}, nil)
	<-started
	waiting, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	sub, err := b.client.CancelSubmission(b.ctx, waiting, "not needed")
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCancelled, sub.Status)
	require.Equal(t, "not needed", sub.CancelReason)
	_, err = b.client.CancelSubmission(b.ctx, waiting, "again")
	require.ErrorIs(t, err, taskling.ErrSubmissionFinished)
	_, err = b.client.CancelSubmission(b.ctx, 1<<40, "")
	require.ErrorIs(t, err, taskling.ErrNotFound)

	sub, err = b.client.CancelSubmission(b.ctx, running, "operator said so")
	require.NoError(t, err)
	require.True(t, sub.CancelRequested)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, taskling.ErrSubmissionCancelled)
		require.ErrorContains(t, err, "operator said so")
	case <-time.After(5 * time.Second):
		t.Fatal("the running submission's context was not cancelled")
	}
	sub = b.waitStatus(t, running, taskling.SubmissionCancelled)
	require.Equal(t, 1, sub.Attempts)
}

// A submission whose worker died mid-run (no heartbeat, nothing else wants a slot) goes back to
// waiting once the holder is judged dead, and runs again elsewhere.
func TestSubmissionOfADeadWorkerRunsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(5))
	id, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	dying := newClient(t, b.pool, withLimit(5))
	started := make(chan *taskling.Execution, 1)
	hang := make(chan struct{})
	b.work(t, dying, func(ctx context.Context, e *taskling.Execution) error {
		started <- e
		e.StopHeartbeatForTest() // the process freezes: no heartbeat, no release
		<-hang
		return nil
	}, nil)
	t.Cleanup(func() { close(hang) })
	first := <-started
	var second atomic.Int64
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		second.Store(int64(e.Attempt()))
		return nil
	}, nil)
	sub := b.waitStatus(t, id, taskling.SubmissionCompleted)
	require.Equal(t, 2, sub.Attempts)
	require.Equal(t, int64(2), second.Load())
	require.NotEqual(t, first.ID(), sub.ExecutionID)
}

func TestShutdownLetsRunningSubmissionsFinish(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	c := newClient(t, b.pool, withLimit(2))
	for range 3 {
		_, err := c.Submit(b.ctx, b.app, b.task, nil)
		require.NoError(t, err)
	}
	release := make(chan struct{})
	var started, finished atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.Work(context.Background(), b.app, b.task, func(ctx context.Context, e *taskling.Execution) error {
			started.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			finished.Add(1)
			return nil
		}, &taskling.WorkOptions{Workers: 2})
	}()
	require.Eventually(t, func() bool { return started.Load() == 2 }, 10*time.Second, 5*time.Millisecond)
	shut := make(chan error, 1)
	go func() { shut <- c.Shutdown(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with runs in progress: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-shut)
	require.NoError(t, <-done)
	require.Equal(t, int32(2), finished.Load())
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.submission WHERE status = 1 AND claimed_by IS NULL`), "the third was not taken")
}

func TestShutdownDeadlineCancelsRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	id, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.client.Work(context.Background(), b.app, b.task, func(ctx context.Context, e *taskling.Execution) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		}, nil)
	}()
	<-started
	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	err = b.client.Shutdown(ctx)
	require.ErrorIs(t, err, taskling.ErrShuttingDown)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-done)
	sub := b.waitStatus(t, id, taskling.SubmissionWaiting)
	require.Contains(t, sub.LastError, "shutting down")
}

func TestSubmitRejectsBadOptions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for name, opts := range map[string]*taskling.SubmitOptions{
		"SubmitOptions.MaxAttempts":    {MaxAttempts: -1},
		"SubmitOptions.ReferenceValue": {ReferenceValue: "a\x00b"},
		"SubmitOptions.Header":         {Header: func() {}},
	} {
		_, err := b.client.Submit(b.ctx, b.app, b.task, opts)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, name)
		require.ErrorContains(t, err, name)
	}
	_, err := b.client.Submit(b.ctx, "", b.task, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	err = b.client.Work(b.ctx, b.app, b.task, nil, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	err = b.client.Work(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { return nil }, &taskling.WorkOptions{Workers: -1})
	require.ErrorContains(t, err, "WorkOptions.Workers")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.submission`))
}

// Shutdown drains RunScheduler too: a run in progress finishes, and no instant is claimed after.
func TestShutdownDrainsTheScheduler(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	release := make(chan struct{})
	var started, finished atomic.Int32
	c := newClient(t, pool, &taskling.Config{HostName: "host-a", Defaults: fast})
	require.NoError(t, c.Schedule(context.Background(), "app", "cron", "* * * * * *", func(ctx context.Context, e *taskling.Execution) error {
		started.Add(1)
		select {
		case <-release:
			finished.Add(1)
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil))
	done := make(chan error, 1)
	go func() { done <- c.RunScheduler(context.Background()) }()
	require.Eventually(t, func() bool { return started.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	shut := make(chan error, 1)
	go func() { shut <- c.Shutdown(context.Background()) }()
	time.Sleep(1500 * time.Millisecond) // past the next instant
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with a run in progress: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-shut)
	require.NoError(t, <-done)
	ran, blocked := scheduledExecutions(t, c)
	require.Len(t, ran, 1)
	require.Empty(t, blocked, "no instant is claimed (not even as overlap-skipped) once Shutdown began")
	require.Equal(t, int32(1), finished.Load(), "the run in progress was not cancelled")
}

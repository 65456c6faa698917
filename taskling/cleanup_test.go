package taskling_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

const day = 24 * time.Hour

// age moves an execution's start and end back by d (its session and liveness terms are left:
// a live holder stays live).
func (b *testBundle) age(t *testing.T, execID int64, d time.Duration) {
	t.Helper()
	b.exec(t, `UPDATE taskling.task_execution SET started_at = started_at - $2::interval WHERE id = $1`, execID, d)
	b.exec(t, `UPDATE taskling.execution_end SET ended_at = ended_at - $2::interval WHERE execution_id = $1`, execID, d)
}

// run starts and ends one execution of the bundle's task (failed when fail) and ages it by d.
func (b *testBundle) run(t *testing.T, fail bool, d time.Duration) int64 {
	t.Helper()
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	if fail {
		// As RecordError(…, true) marks it; in SQL, since upgrade tests run this on schemas older
		// than the library's statements.
		b.exec(t, `UPDATE taskling.task_execution SET failed = true WHERE id = $1`, e.ID())
	}
	require.NoError(t, e.Complete(b.ctx))
	b.age(t, e.ID(), d)
	return e.ID()
}

// blocked records a denied start of the bundle's task (its limit must be held) aged by d.
func (b *testBundle) blockedStart(t *testing.T, d time.Duration) int64 {
	t.Helper()
	before := b.count(t, `SELECT coalesce(max(id), 0) FROM taskling.task_execution WHERE blocked`)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	id := int64(b.count(t, `SELECT max(id) FROM taskling.task_execution WHERE blocked`))
	require.Greater(t, id, int64(before))
	b.age(t, id, d)
	return id
}

func (b *testBundle) executionIDs(t *testing.T) []int64 {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM taskling.task_execution ORDER BY id`)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func (b *testBundle) cleanup(t *testing.T, c *taskling.Client) taskling.CleanupCounts {
	t.Helper()
	res, err := c.Cleanup(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Empty(t, res[0].Skipped)
	return res[0].Counts
}

func noAutoCleanup(cfg *taskling.Config) *taskling.Config {
	cfg.CleanupInterval = -1
	return cfg
}

// TestCleanupDeletesExactlyWhatThePolicySays: with the default keep settings (14 days completed,
// 40 failed, 1 blocked), old rows go with their events and ends, younger ones stay; a dry run
// counts the same rows and deletes nothing.
func TestCleanupDeletesExactlyWhatThePolicySays(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	oldDone := b.run(t, false, 15*day)
	youngDone := b.run(t, false, 13*day)
	oldFailed := b.run(t, true, 41*day)
	youngFailed := b.run(t, true, 39*day)
	holder := b.start(t, nil)
	oldBlocked := b.blockedStart(t, 2*day)
	youngBlocked := b.blockedStart(t, 12*time.Hour)
	require.NoError(t, holder.Checkpoint(b.ctx, "an event"))
	require.NoError(t, holder.Complete(b.ctx))
	latest := b.run(t, false, 0)
	b.exec(t, `INSERT INTO taskling.task_execution_event (execution_id, event_type, message) VALUES ($1, 2, 'old'), ($2, 3, 'old')`, oldDone, oldFailed)

	plan, err := b.client.Cleanup(b.ctx, b.app, b.task, &taskling.CleanupOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, taskling.CleanupCounts{Completed: 1, Failed: 1, Blocked: 1}, plan[0].Counts)
	require.Equal(t, taskling.Retention{Completed: 14 * day, Failed: 40 * day, Blocked: day}, plan[0].Keep)
	require.Len(t, b.executionIDs(t), 8, "a dry run deletes nothing")

	got := b.cleanup(t, b.client)
	require.Equal(t, taskling.CleanupCounts{Completed: 1, Failed: 1, Blocked: 1}, got)
	want := []int64{youngDone, youngFailed, holder.ID(), youngBlocked, latest}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	require.Equal(t, want, b.executionIDs(t))
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.task_execution_event WHERE execution_id = ANY($1)`, []int64{oldDone, oldFailed}))
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.execution_end WHERE execution_id = ANY($1)`, []int64{oldDone, oldFailed, oldBlocked}))
	require.Equal(t, taskling.CleanupCounts{}, b.cleanup(t, b.client), "a second cleanup finds nothing")
}

// TestCleanupFollowsOverridesAndForever: an operator's keep override wins over the declared
// settings; KeepForever keeps everything.
func TestCleanupFollowsOverridesAndForever(t *testing.T) {
	t.Parallel()
	cfg := withLimit(1)
	cfg.Defaults.KeepCompleted = taskling.KeepForever
	b := setup(t, noAutoCleanup(cfg))
	old := b.run(t, false, 3000*day)
	b.run(t, false, 0)
	require.Equal(t, taskling.CleanupCounts{}, b.cleanup(t, b.client))
	require.Contains(t, b.executionIDs(t), old)

	hour := time.Hour
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeepCompleted: &hour}))
	require.Equal(t, taskling.CleanupCounts{Completed: 1}, b.cleanup(t, b.client))
	require.NotContains(t, b.executionIDs(t), old)

	tooShort := time.Second
	err := b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeepBlocked: &tooShort})
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.ErrorContains(t, err, "KeepBlocked")
	_, err = taskling.NewClient(b.pool, &taskling.Config{Defaults: taskling.TaskSettings{KeepFailed: time.Second}})
	require.ErrorContains(t, err, "KeepFailed")
}

// TestCleanupKeepsTheLatestExecution: a task's only execution stays however old.
func TestCleanupKeepsTheLatestExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	only := b.run(t, true, 1000*day)
	require.Equal(t, taskling.CleanupCounts{}, b.cleanup(t, b.client))
	require.Equal(t, []int64{only}, b.executionIDs(t))
}

// TestCleanupKeepsALiveHolderAndAnUnjudgedDeadOne: an execution that has not ended is never
// deleted, however old its start: a live holder keeps its slot and completes; a holder whose
// process died but whom nobody has reclaimed yet stays until it is.
func TestCleanupKeepsALiveHolderAndAnUnjudgedDeadOne(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(2)))
	live := b.start(t, nil)
	b.age(t, live.ID(), 100*day)
	dead := b.startDead(t, withLimit(2), nil)
	b.exec(t, `UPDATE taskling.task_execution SET started_at = started_at - interval '100 days' WHERE id = $1`, dead.ID())
	b.run(t, false, 0) // reclaims nothing: one slot is free
	require.Equal(t, taskling.CleanupCounts{}, b.cleanup(t, b.client))
	require.Contains(t, b.executionIDs(t), live.ID())
	require.Contains(t, b.executionIDs(t), dead.ID())
	require.NoError(t, live.Context().Err())
	require.NoError(t, live.Complete(b.ctx))
}

// TestCleanupKeepsTheExecutionOfALiveBlockAndTheLatestBlocks: the execution of a block that failed
// (it will be retaken) stays; completed blocks of deleted executions go with their items, except
// the latest of their kind (continuing ranges start after it).
func TestCleanupKeepsTheExecutionOfALiveBlockAndTheLatestBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	first, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	blocks, err := first.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 30, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.NoError(t, blocks[0].Complete(b.ctx, 10))
	require.NoError(t, blocks[1].Fail(b.ctx, "retry me"))
	require.NoError(t, blocks[2].Complete(b.ctx, 10))
	require.NoError(t, first.Complete(b.ctx))
	b.age(t, first.ID(), 100*day)

	second, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	lists, err := second.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{"a", "b"}, MaxBlockSize: 10}, nil)
	require.NoError(t, err)
	items, err := lists[0].Items(b.ctx)
	require.NoError(t, err)
	for _, it := range items {
		require.NoError(t, lists[0].ItemCompleted(b.ctx, it))
	}
	require.NoError(t, lists[0].Complete(b.ctx))
	require.NoError(t, second.Complete(b.ctx))
	b.age(t, second.ID(), 100*day)
	b.run(t, false, 0)

	require.Equal(t, taskling.CleanupCounts{Completed: 1, Blocks: 0}, b.cleanup(t, b.client))
	require.Contains(t, b.executionIDs(t), first.ID(), "the failed block's execution stays")
	require.NotContains(t, b.executionIDs(t), second.ID())
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.block WHERE kind = 3`), "the latest list block stays")

	// Once the failed block is retaken and completed, the first execution goes, with its first
	// block; the last numeric block stays (ContinueFromLast reads it).
	third, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	retaken, err := third.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 30, MaxSize: 10},
		&taskling.BlockOptions{ReprocessFailed: &taskling.RetryPolicy{Within: 1000 * day, RetryLimit: 3}})
	require.NoError(t, err)
	require.Len(t, retaken, 1, "only the failed block: the others exist")
	require.NoError(t, retaken[0].Complete(b.ctx, 10))
	require.NoError(t, third.Complete(b.ctx))
	b.run(t, false, 0)
	require.Equal(t, taskling.CleanupCounts{Completed: 1, Blocks: 1}, b.cleanup(t, b.client))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM taskling.block WHERE kind = 1`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.block WHERE kind = 1 AND to_number = 30`))
}

// TestCleanupKeepsABlockWithAPendingForce: issue 22 item 5. A completed block an operator forced
// whose execution is past retention stays — the block, its force, its attempt and its execution —
// until an execution takes it; then the old execution goes as any other. Before the fix the
// cleanup deleted the block, and its force with it (cascade), while the audit row said forced.
func TestCleanupKeepsABlockWithAPendingForce(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	first, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	blocks, err := first.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 20, MaxSize: 10}, nil)
	require.NoError(t, err)
	for _, bl := range blocks {
		require.NoError(t, bl.Complete(b.ctx, 10))
	}
	require.NoError(t, first.Complete(b.ctx))
	b.age(t, first.ID(), 100*day)
	forced := blocks[0].ID // blocks[1] is the latest of its kind, kept anyway
	require.NoError(t, b.client.ForceBlock(b.ctx, forced, "ops"))
	b.run(t, false, 0)

	plan, err := b.client.Cleanup(b.ctx, b.app, b.task, &taskling.CleanupOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, taskling.CleanupCounts{}, plan[0].Counts)
	require.Equal(t, taskling.CleanupCounts{}, b.cleanup(t, b.client))
	info, err := b.client.Block(b.ctx, forced)
	require.NoError(t, err)
	require.True(t, info.ForcePending, "the force is still pending")
	attempts, err := b.client.BlockAttempts(b.ctx, forced)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Contains(t, b.executionIDs(t), first.ID())

	// Taken and run again: the force is spent, and the old execution goes as any other.
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{OnlyOld: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, forced, got[0].ID)
	require.NoError(t, got[0].Complete(b.ctx, 10))
	require.NoError(t, e.Complete(b.ctx))
	b.run(t, false, 0)
	require.Equal(t, taskling.CleanupCounts{Completed: 1}, b.cleanup(t, b.client))
	require.NotContains(t, b.executionIDs(t), first.ID())
	attempts, err = b.client.BlockAttempts(b.ctx, forced)
	require.NoError(t, err)
	require.Len(t, attempts, 1, "the first attempt went with its execution")
	require.Equal(t, 2, attempts[0].Attempt)
}

// TestCleanupKeepsTheAttemptsOfAWaitingSubmission: a submission sent back to waiting after a
// failed attempt keeps that attempt's execution.
func TestCleanupKeepsTheAttemptsOfAWaitingSubmission(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{MaxAttempts: 3})
	require.NoError(t, err)
	attempted := make(chan struct{})
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.client.Work(ctx, b.app, b.task, func(context.Context, *taskling.Execution) error {
			close(attempted)
			cancel()
			return fmt.Errorf("first attempt fails")
		}, nil)
	}()
	<-attempted
	require.NoError(t, <-done)
	sub := b.waitStatus(t, id, taskling.SubmissionWaiting)
	attempts, err := b.client.SubmissionAttempts(b.ctx, id)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	b.age(t, attempts[0], 100*day)
	b.run(t, false, 0)
	require.Equal(t, taskling.CleanupCounts{}, b.cleanup(t, b.client))
	require.Contains(t, b.executionIDs(t), attempts[0])
	require.Equal(t, 1, sub.Attempts)
}

// TestCleanupKeepsIdempotentPromises: a succeeded idempotent reference is still refused after its
// execution row is deleted; a duplicate submission reference still returns the first submission
// (kept without its header) and does not run it again.
func TestCleanupKeepsIdempotentPromises(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{ReferenceValue: "invoice-7", Idempotent: true})
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))
	b.age(t, e.ID(), 100*day)

	sub, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{ReferenceValue: "upload-9", Header: map[string]int{"rows": 3}})
	require.NoError(t, err)
	var runs sync.WaitGroup
	runs.Add(1)
	b.work(t, b.client, func(context.Context, *taskling.Execution) error { runs.Done(); return nil }, nil)
	runs.Wait()
	b.waitStatus(t, sub, taskling.SubmissionCompleted)
	attempts, err := b.client.SubmissionAttempts(b.ctx, sub)
	require.NoError(t, err)
	b.age(t, attempts[0], 100*day)
	b.exec(t, `UPDATE taskling.submission SET finished_at = finished_at - interval '100 days' WHERE id = $1`, sub)
	b.run(t, false, 0)

	got := b.cleanup(t, b.client)
	require.Equal(t, int64(2), got.Completed)
	require.Equal(t, int64(1), got.Compacted)
	require.NotContains(t, b.executionIDs(t), e.ID())
	require.NotContains(t, b.executionIDs(t), attempts[0])

	_, err = b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{ReferenceValue: "invoice-7", Idempotent: true})
	require.ErrorIs(t, err, taskling.ErrDuplicateReference)
	again, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{ReferenceValue: "upload-9"})
	require.NoError(t, err)
	require.Equal(t, sub, again)
	s, err := b.client.Submission(b.ctx, sub)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCompleted, s.Status)
	require.Empty(t, s.Header, "compacted")
}

// TestCleanupKeepsBackfillFromRerunningDeletedInstants: cron instants whose executions were
// deleted are remembered: Backfill does not run them again.
func TestCleanupKeepsBackfillFromRerunningDeletedInstants(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	b := &testBundle{ctx: context.Background(), pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(1))), app: "app", task: "cron"}
	var mu sync.Mutex
	ran := map[time.Time]int{}
	fn := func(_ context.Context, e *taskling.Execution) error {
		mu.Lock()
		defer mu.Unlock()
		ran[e.ScheduledFor()]++
		return nil
	}
	require.NoError(t, b.client.Schedule(b.ctx, b.app, b.task, "* * * * * *", fn, nil))
	t0 := dbNow(t, pool).Truncate(time.Second).Add(-10 * time.Second)
	first, err := b.client.Backfill(b.ctx, b.app, b.task, t0, t0.Add(3*time.Second))
	require.NoError(t, err)
	require.Len(t, first, 4)
	b.exec(t, `UPDATE taskling.execution_end x SET ended_at = ended_at - interval '100 days'
        FROM taskling.task_execution e WHERE e.id = x.execution_id AND e.scheduled_for IS NOT NULL`)
	b.exec(t, `UPDATE taskling.task_execution SET started_at = started_at - interval '100 days' WHERE scheduled_for IS NOT NULL`)

	got := b.cleanup(t, b.client)
	require.Equal(t, int64(3), got.Instants, "the latest scheduled run stays (the schedule's last run)")
	again, err := b.client.Backfill(b.ctx, b.app, b.task, t0, t0.Add(3*time.Second))
	require.NoError(t, err)
	require.Empty(t, again, "deleted instants are remembered")
	for at, n := range ran {
		require.Equal(t, 1, n, "instant %s ran %d times", at, n)
	}
}

// TestTwoCleanersDeleteEachRowOnce: two clients cleaning one task at once never both run (one is
// told another host is cleaning it, or finds nothing left), and the rows are deleted once.
func TestTwoCleanersDeleteEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	b.run(t, false, 0)
	const n = 5000
	seedOldExecutions(t, b, n)
	other := newClient(t, b.pool, noAutoCleanup(withLimit(1)))
	var wg sync.WaitGroup
	results := make([][]taskling.TaskCleanup, 2)
	for i, c := range []*taskling.Client{b.client, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Cleanup(b.ctx, b.app, b.task, nil)
			require.NoError(t, err)
			results[i] = res
		}()
	}
	wg.Wait()
	total, ran := int64(0), 0
	for _, r := range results {
		total += r[0].Counts.Completed
		if r[0].Skipped == "" && r[0].Counts.Completed > 0 {
			ran++
		}
	}
	require.Equal(t, int64(n), total)
	require.Equal(t, 1, ran, "one cleaner deleted everything")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_execution`))
}

// TestAutomaticCleanupRunsOncePerIntervalFleetWide: clients clean on their own; the claim
// records the cleaning, and two clients do not clean a task twice in one interval.
func TestAutomaticCleanupRunsOncePerIntervalFleetWide(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	cfg := func() *taskling.Config { c := withLimit(1); c.CleanupInterval = time.Second; return c }
	b := &testBundle{ctx: context.Background(), pool: pool, client: newClient(t, pool, cfg()), app: "app", task: "task"}
	cleaned := make(chan taskling.CleanupCounts, 100)
	hooks := taskling.Hooks{Cleaned: func(_, _ string, c taskling.CleanupCounts) { cleaned <- c }}
	b.client.AddHooks(hooks)
	other := newClient(t, pool, cfg())
	other.AddHooks(hooks)
	b.run(t, false, 0)
	seedOldExecutions(t, b, 2500)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.task_execution`) == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT rows_deleted FROM taskling.retention r JOIN taskling.task_definition d ON d.id = r.task_id
            WHERE d.task_name = 'task'`) == 2500
	}, 5*time.Second, 20*time.Millisecond)
	var deleted int64
	for len(cleaned) > 0 {
		deleted += (<-cleaned).Completed
	}
	require.Equal(t, int64(2500), deleted)
}

// seedOldExecutions inserts n completed executions of the bundle's task, 100 days old.
func seedOldExecutions(t *testing.T, b *testBundle, n int) {
	t.Helper()
	b.exec(t, `
WITH d AS (SELECT id FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2),
e AS (
    INSERT INTO taskling.task_execution (task_id, started_at, last_keep_alive, host_name, death_mode, library_version, token_id, fence)
    SELECT d.id, now() - interval '100 days' - g * interval '1 second', now() - interval '100 days', 'seed', 1, 'seed', gen_random_uuid(), g
    FROM d, generate_series(1, $3) g
    RETURNING id, started_at
)
INSERT INTO taskling.execution_end (execution_id, ended_at, outcome) SELECT id, started_at + interval '1 second', 1 FROM e`, b.app, b.task, n)
}

// TestCleanupOfTasksWithoutARetentionRow: a task whose hosts never declared keep settings (it
// was created before retention existed, or by an operator, and has not started since) has no
// retention row; cleaning every task still works, with this client's settings for it.
func TestCleanupOfTasksWithoutARetentionRow(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	b.exec(t, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ($1, $2)`, b.app, b.task)
	seedOldExecutions(t, b, 30)
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.retention`))
	res, err := b.client.Cleanup(b.ctx, "", "", nil)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, taskling.CleanupCounts{Completed: 29}, res[0].Counts, "all but the latest")
}

// TestACleanerThatDiedFreesItsTaskWhenItsClaimLapses: a task another host is cleaning is skipped
// while that host's claim holds; once the claim lapses (the host died without releasing it),
// another host cleans the task.
func TestACleanerThatDiedFreesItsTaskWhenItsClaimLapses(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	b.run(t, false, 0)
	seedOldExecutions(t, b, 10)
	b.exec(t, `INSERT INTO taskling.retention (task_id, last_cleaned_at, claimed_by, claimed_until)
SELECT id, now(), 'dead-host', now() + interval '1 hour' FROM taskling.task_definition WHERE task_name = $1
ON CONFLICT (task_id) DO UPDATE SET last_cleaned_at = excluded.last_cleaned_at, claimed_by = excluded.claimed_by,
    claimed_until = excluded.claimed_until`, b.task)
	res, err := b.client.Cleanup(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Equal(t, "another host is cleaning it", res[0].Skipped)
	require.Equal(t, 11, b.count(t, `SELECT count(*) FROM taskling.task_execution`))

	b.exec(t, `UPDATE taskling.retention SET claimed_until = now() - interval '1 second'`)
	require.Equal(t, taskling.CleanupCounts{Completed: 10}, b.cleanup(t, b.client))
}

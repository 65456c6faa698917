package taskling_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestSubmissionsUpgradeKeepsExecutionsAndHolders: 0007 (submissions) on a database of 0006 in
// use. Hosts that started before the upgrade go on across it: one holds the only slot (in
// Override mode, so it sends no heartbeat: 0007 changes no token format, and these hosts make
// only calls that read nothing of 0007), another waits in the queue for it. After the upgrade
// every execution keeps its status, the holder keeps its slot and completes normally (its
// end fires the new trigger), the waiter keeps its place ahead of the new host's, and
// Submit/Work run a submission.
func TestSubmissionsUpgradeKeepsExecutionsAndHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 6))

	const app, task = "app", "task"
	old := newClient(t, pool, &taskling.Config{HostName: "old-a",
		Defaults: taskling.TaskSettings{ConcurrencyLimit: 1, DeathMode: taskling.DeathModeOverride, OverrideThreshold: time.Hour}})
	var completed, failed int64
	require.NoError(t, old.Run(ctx, app, task, func(_ context.Context, e *taskling.Execution) error {
		completed = e.ID()
		return nil
	}, nil))
	require.Error(t, old.Run(ctx, app, task, func(_ context.Context, e *taskling.Execution) error {
		failed = e.ID()
		return errors.New("bad input")
	}, nil))
	holder, err := old.StartExecution(ctx, app, task, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Complete(context.Background()) })

	oldWaiter := newClient(t, pool, &taskling.Config{HostName: "old-b", Defaults: withLimit(1).Defaults})
	waitCtx, cancelWait := context.WithCancel(ctx)
	t.Cleanup(cancelWait)
	granted := make(chan *taskling.Execution, 1)
	waitErr := make(chan error, 1)
	go func() {
		e, err := oldWaiter.StartExecution(waitCtx, app, task, &taskling.StartOptions{WaitForSlot: true})
		if err != nil {
			waitErr <- err
			return
		}
		granted <- e
	}()
	t.Cleanup(func() {
		select {
		case e := <-granted:
			_ = e.Complete(context.Background())
		default:
		}
	})
	require.Eventually(t, func() bool {
		var queued bool
		err := pool.QueryRow(ctx, `SELECT queue <> '' FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2`, app, task).Scan(&queued)
		return err == nil && queued
	}, 30*time.Second, 5*time.Millisecond, "the waiter queues")

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, withLimit(1)), app: app, task: task}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'execution_end_settle_submissions'`))
	infos, err := b.client.LastExecutions(ctx, app, task, 10)
	require.NoError(t, err)
	require.Len(t, infos, 4)
	require.Equal(t, taskling.StatusWaiting, infos[0].Status)
	require.Equal(t, "old-b", infos[0].Host)
	require.Equal(t, 1, infos[0].Position)
	require.Equal(t, map[int64]taskling.Status{holder.ID(): taskling.StatusInProgress, failed: taskling.StatusFailed, completed: taskling.StatusCompleted},
		map[int64]taskling.Status{infos[1].ID: infos[1].Status, infos[2].ID: infos[2].Status, infos[3].ID: infos[3].Status})

	id, err := b.client.Submit(ctx, app, task, nil)
	require.NoError(t, err)
	var runs atomic.Int32
	b.work(t, b.client, func(_ context.Context, e *taskling.Execution) error {
		if e.SubmissionID() == id {
			runs.Add(1)
		}
		return nil
	}, nil)
	// The new host claims the submission and queues behind the waiter; the holder keeps its slot.
	require.Eventually(t, func() bool {
		d, err := b.client.Task(ctx, app, task)
		return err == nil && d.Waiting == 2
	}, 30*time.Second, 5*time.Millisecond, "the new host queues behind the old waiter")
	d, err := b.client.Task(ctx, app, task)
	require.NoError(t, err)
	require.Len(t, d.Slots, 1)
	require.NotNil(t, d.Slots[0].Holder)
	require.Equal(t, holder.ID(), d.Slots[0].Holder.ExecutionID)
	require.True(t, d.Slots[0].Holder.Alive)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.submission WHERE id = $1 AND status = 1 AND claimed_by IS NOT NULL`, id))

	// The holder completes as it would have before: its end fires the trigger, which settles
	// nothing (it runs no submission).
	require.NoError(t, holder.Complete(ctx))
	var waiter *taskling.Execution
	select {
	case waiter = <-granted:
	case err := <-waitErr:
		t.Fatalf("the old waiter: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the old waiter was not granted the slot")
	}
	sub, err := b.client.Submission(ctx, id)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionWaiting, sub.Status, "the old waiter was first in line")
	require.Zero(t, sub.Attempts)
	require.NoError(t, waiter.Complete(ctx))

	sub = b.waitStatus(t, id, taskling.SubmissionCompleted)
	require.Equal(t, 1, sub.Attempts)
	require.Equal(t, int32(1), runs.Load())
	require.Empty(t, sub.LastError)

	for exec, want := range map[int64]taskling.Status{completed: taskling.StatusCompleted, failed: taskling.StatusFailed,
		holder.ID(): taskling.StatusCompleted, waiter.ID(): taskling.StatusCompleted, sub.ExecutionID: taskling.StatusCompleted} {
		d, err := b.client.Execution(ctx, exec)
		require.NoError(t, err)
		require.Equal(t, want, d.Status, "execution %d", exec)
	}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.execution_end WHERE execution_id = $1 AND outcome = 1`, holder.ID()))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.submission`))
}

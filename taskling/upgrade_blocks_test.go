package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestBlocksUpgradeKeepsHoldersSubmissionsAndHistory: 0008 (blocks) on a database of 0007 in use:
// a holder started before the upgrade keeps its slot, takes blocks after it and completes; a
// waiting submission and the history are kept.
func TestBlocksUpgradeKeepsHoldersSubmissionsAndHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 7))

	const app, task = "app", "task"
	old := newClient(t, pool, withLimit(1))
	require.NoError(t, old.Run(ctx, app, task, func(context.Context, *taskling.Execution) error { return nil }, nil))
	holder, err := old.StartExecution(ctx, app, task, nil)
	require.NoError(t, err)
	sub, err := old.Submit(ctx, app, task, &taskling.SubmitOptions{ReferenceValue: "upload-1"})
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, withLimit(1)), app: app, task: task}
	infos, err := b.client.LastExecutions(ctx, app, task, 10)
	require.NoError(t, err)
	require.Len(t, infos, 2)
	require.Equal(t, taskling.StatusInProgress, infos[0].Status)
	require.Equal(t, taskling.StatusCompleted, infos[1].Status)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "the holder keeps its slot")

	blocks, err := holder.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 5}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	require.NoError(t, blocks[0].Complete(ctx, 5))
	require.NoError(t, holder.Complete(ctx))

	s, err := b.client.Submission(ctx, sub)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionWaiting, s.Status)
	done := make(chan struct{})
	b.work(t, b.client, func(context.Context, *taskling.Execution) error { close(done); return nil }, nil)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the submission from before the upgrade did not run")
	}
	b.waitStatus(t, sub, taskling.SubmissionCompleted)
}

// TestDisputesUpgradeKeepsHoldersAndBlocks: 0009 (the record of hosts' disagreeing declarations)
// on a database of 0008 in use: a holder with blocks keeps them across the upgrade, and the next
// different declaration from another host is recorded.
func TestDisputesUpgradeKeepsHoldersAndBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 8))
	const app, task = "app", "task"
	old := newClient(t, pool, &taskling.Config{HostName: "old", Defaults: taskling.TaskSettings{ConcurrencyLimit: 2}})
	holder, err := old.StartExecution(ctx, app, task, nil)
	require.NoError(t, err)
	// The holder's blocks as a release of 0008 took them (this binary's block statements need
	// migration 0018): [1, 5] completed, [6, 10] taken.
	_, err = pool.Exec(ctx, `
WITH b AS (
    INSERT INTO taskling.block (task_id, kind, execution_id, from_number, to_number, status)
    SELECT task_id, 1, id, f, f + 4, CASE WHEN f = 1 THEN 3 ELSE 1 END
    FROM taskling.task_execution, unnest(ARRAY[1, 6]) AS f WHERE id = $1
    RETURNING id, status
)
INSERT INTO taskling.block_attempt (block_id, attempt, execution_id, status, ended_at, items_done)
SELECT id, 1, $1, status, CASE WHEN status = 3 THEN clock_timestamp() END, CASE WHEN status = 3 THEN 5 END FROM b`, holder.ID())
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))

	taken, err := holder.LastBlock(ctx, taskling.KindNumericRange, taskling.LastCreated)
	require.NoError(t, err)
	require.EqualValues(t, 6, taken.From)
	taken.Attempt = 1 // LastBlock's handle is for information: the holder's attempt is its first
	require.NoError(t, taken.Complete(ctx, 5), "the holder completes the block it took before the upgrade")
	info, err := old.Task(ctx, app, task)
	require.NoError(t, err)
	require.Nil(t, info.Disagreement)
	require.Equal(t, 1, info.SlotsUsed)
	other := newClient(t, pool, &taskling.Config{HostName: "new", Defaults: taskling.TaskSettings{ConcurrencyLimit: 3}})
	e, err := other.StartExecution(ctx, app, task, nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	require.Eventually(t, func() bool {
		info, err = other.Task(ctx, app, task)
		require.NoError(t, err)
		return info.Disagreement != nil
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "old", info.Disagreement.OtherHost)
	require.NoError(t, holder.Complete(ctx))
}

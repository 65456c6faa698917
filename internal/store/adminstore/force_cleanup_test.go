package adminstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/store/adminstore"
	"github.com/taskling-go/taskling/internal/store/blockstore"
	"github.com/taskling-go/taskling/tasklingtype"
)

// oldCompletedBlocks runs an execution that creates and completes numeric blocks [1, 10] and
// [11, 20], ages it past every retention, then runs a newer one (the task's latest, always kept).
// It returns the first block, which the cleanup may delete with its execution.
func (b *testBundle) oldCompletedBlocks(t *testing.T) int64 {
	t.Helper()
	res := b.acquire(t, -1)
	rows, err := b.blocks.TakeBlocks(b.ctx, blockstore.TakeBlocksRequest{TaskID: b.taskID, ExecutionID: res.ExecutionID, Kind: codes.BlockNumeric,
		Ranges: &blockstore.Ranges{From: 1, To: 20, MaxSize: 10}})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	for _, r := range rows {
		require.NoError(t, b.blocks.SetBlockStatus(b.ctx, r.ID, 1, codes.BlockCompleted, nil, 0, nil))
	}
	b.release(t, res)
	_, err = b.pool.Exec(b.ctx, `
WITH e AS (UPDATE taskling.task_execution SET started_at = started_at - interval '100 days' WHERE id = $1)
UPDATE taskling.execution_end SET ended_at = ended_at - interval '100 days' WHERE execution_id = $1`, res.ExecutionID)
	require.NoError(t, err)
	b.release(t, b.acquire(t, -1))
	return rows[0].ID
}

// lockForces begins a transaction that holds the task's force lock, as a force or a cleanup batch
// in progress does.
func (b *testBundle) lockForces(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(b.ctx, `SELECT taskling.lock_task_forces($1)`, b.taskID)
	require.NoError(t, err)
	return tx
}

// waitForALockWait waits until a session of the test's database waits for a lock.
func (b *testBundle) waitForALockWait(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n > 0
	}, 10*time.Second, 5*time.Millisecond)
}

var keep = execution.Retention{Completed: 14 * 24 * time.Hour, Failed: 40 * 24 * time.Hour, Blocked: 24 * time.Hour}

// TestACleanupBatchSeesAForceCommittedWhileItWaited: a force of an old completed block commits
// while a cleanup batch of its task waits for it. The batch reads the forces after the force lock,
// so it keeps the block and its force. (Without the lock, its snapshot predated the force: it
// deleted the block, waiting only for the force's key lock on it, and the force went by cascade.)
func TestACleanupBatchSeesAForceCommittedWhileItWaited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	block := b.oldCompletedBlocks(t)
	force := b.lockForces(t)
	_, err := force.Exec(b.ctx, `INSERT INTO taskling.forced_block (block_id, task_id, forced_by) VALUES ($1, $2, 'ops')`, block, b.taskID)
	require.NoError(t, err)

	done := make(chan error, 1)
	var counts tasklingtype.CleanupCounts
	go func() {
		var err error
		counts, _, err = (&adminstore.Cleaner{Store: b.admin, TaskID: b.taskID, Keep: keep}).Batch(b.ctx)
		done <- err
	}()
	b.waitForALockWait(t)
	require.NoError(t, force.Commit(b.ctx))
	require.NoError(t, <-done)
	require.Equal(t, tasklingtype.CleanupCounts{}, counts)
	info, ok, err := b.blocks.BlockByID(b.ctx, block)
	require.NoError(t, err)
	require.True(t, ok, "the forced block stays")
	require.True(t, info.ForcePending)
}

// TestAForceThatWaitedForACleanupBatchFindsItsBlockGone: a force of a block that a cleanup batch
// in progress deletes waits for the batch, then answers not found and records nothing. (Without
// the lock, it failed on the foreign key of the deleted block.)
func TestAForceThatWaitedForACleanupBatchFindsItsBlockGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	block := b.oldCompletedBlocks(t)
	batch := b.lockForces(t)
	_, err := batch.Exec(b.ctx, `DELETE FROM taskling.block WHERE id = $1`, block)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := b.blocks.ForceBlock(b.ctx, block, execution.Operator{Principal: "ops", By: "ops"})
		done <- err
	}()
	b.waitForALockWait(t)
	require.NoError(t, batch.Commit(b.ctx))
	require.ErrorIs(t, <-done, blockstore.ErrBlockNotFound)
	var changes int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.operator_change`).Scan(&changes))
	require.Zero(t, changes)
}

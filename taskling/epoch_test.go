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

// forgetTimeline makes the database look as if it had just been promoted or restored: the
// timeline it writes on is not in taskling.epoch, as it would not be after a failover.
func forgetTimeline(t *testing.T, b *testBundle) {
	t.Helper()
	b.exec(t, `DELETE FROM taskling.epoch`)
}

// TestANewTimelineHoldsGrantsForAThresholdAndJumpsFences: after a switch to a timeline not seen
// before (a failover that may have lost grants), a task grants nothing for one death threshold —
// a holder of a lost grant has cancelled itself by then — and its fences continue above
// anything the old timeline could have handed out. A holder the new primary knows keeps its slot.
func TestANewTimelineHoldsGrantsForAThresholdAndJumpsFences(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(2)))
	known := b.start(t, nil)
	require.Equal(t, int64(1), known.FencingToken())

	forgetTimeline(t, b)
	switched := time.Now()
	err := b.denied(t, nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached, "no grant within a threshold of the switch")

	waited, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = waited.Complete(context.Background()) })
	require.GreaterOrEqual(t, time.Since(switched), fast.KeepAliveDeathThreshold-100*time.Millisecond, "granted after the hold")
	require.Greater(t, waited.FencingToken(), int64(1)<<40, "a fence of the new epoch")
	require.NoError(t, known.Context().Err(), "the known holder keeps its slot")
	require.NoError(t, known.Complete(b.ctx))

	next, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err, "the hold is over")
	require.Equal(t, waited.FencingToken()+1, next.FencingToken())
	require.NoError(t, next.Complete(b.ctx))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.epoch`))
}

// TestTheTimelineOfTheUpgradeHoldsNothing: the timeline the schema was migrated on is recorded
// with no hold: the first start after installing or upgrading is granted at once, fence 1.
func TestTheTimelineOfTheUpgradeHoldsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.epoch WHERE since = '-infinity' AND fence_base = 0`))
	e := b.start(t, nil)
	require.Equal(t, int64(1), e.FencingToken())
}

// TestAReleaseLostInAFailoverIsSentAgain: the new primary lacks a release the old one
// acknowledged (asynchronous replication): the slot looks held by an execution whose process is
// alive and heartbeating. On seeing the new timeline, the process sends its recent releases
// again, and the slot frees.
func TestAReleaseLostInAFailoverIsSentAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	b.start(t, nil) // a running execution: the process's session keeps heartbeating
	b.task = "lost-release"
	e := b.start(t, nil)
	var tokens, holders string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT tokens, holders FROM taskling.task_definition WHERE task_name = $1`, b.task).Scan(&tokens, &holders))
	require.NoError(t, e.Complete(b.ctx))
	// What the promoted standby has: the state before the release.
	b.exec(t, `UPDATE taskling.task_definition SET tokens = $2, holders = $3 WHERE task_name = $1`, b.task, tokens, holders)
	b.exec(t, `DELETE FROM taskling.execution_end WHERE execution_id = $1`, e.ID())
	forgetTimeline(t, b)

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	next, err := b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err, "the lost release was sent again: the slot is free")
	require.NoError(t, next.Complete(b.ctx))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.execution_end WHERE execution_id = $1 AND outcome = 1`, e.ID()))
}

// TestEpochsUpgradeHoldsNothing: 0012 (epochs, grant protocol 3) on a database of 0010 in use: a
// holder started before the upgrade keeps its slot, the next start is granted at once with the
// next fence (the upgrade's timeline is known: no hold, no jump), and the protocol is 3.
func TestEpochsUpgradeHoldsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 10))
	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(2))), app: "app", task: "task"}
	holder := b.start(t, nil)
	require.Equal(t, int64(1), holder.FencingToken())

	require.NoError(t, migrations.UpTo(ctx, pool, 12))

	require.Equal(t, 3, b.count(t, `SELECT version FROM taskling.protocol`))
	next := b.start(t, nil)
	require.Equal(t, int64(2), next.FencingToken())
	require.NoError(t, holder.Context().Err())
	require.NoError(t, holder.Complete(ctx))
	require.NoError(t, next.Complete(ctx))
}

// TestAHolderWhoseIdNamesAnotherExecutionLosesItsLease: a failover that lost commits rewinds the
// execution id sequence, so a lost holder's id may name another session's execution on the new
// primary. Its heartbeat must not count that row as its own: the lease is lost.
func TestAHolderWhoseIdNamesAnotherExecutionLosesItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	e := b.start(t, nil)
	b.exec(t, `UPDATE taskling.task_execution SET session_id = session_id + 1000 WHERE id = $1`, e.ID())
	select {
	case <-e.Context().Done():
		require.True(t, leaseLost(e))
	case <-time.After(5 * time.Second):
		t.Fatal("the holder kept its lease on another session's row")
	}
}

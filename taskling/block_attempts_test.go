package taskling_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// Issue 22 item 4: an attempt's status follows the block's rule. An attempt that did not end is
// dead once its execution no longer runs, or once a later attempt took the block; history never
// shows two attempts of one block running at once.

// attemptStatuses reads a block's status and its attempts' statuses, first first.
func (b *testBundle) attemptStatuses(t *testing.T, id int64) (taskling.BlockStatus, []taskling.BlockStatus) {
	t.Helper()
	info, err := b.client.Block(b.ctx, id)
	require.NoError(t, err)
	attempts, err := b.client.BlockAttempts(b.ctx, id)
	require.NoError(t, err)
	out := make([]taskling.BlockStatus, len(attempts))
	for i, a := range attempts {
		out[i] = a.Status
		require.Equal(t, i+1, a.Attempt)
	}
	return info.Status, out
}

// TestAnAttemptLeftByACompletedExecutionIsDead: before the fix the attempts read [started] while
// the block read dead, and [started started] after the retake.
func TestAnAttemptLeftByACompletedExecutionIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	first := b.start(t, nil)
	made, err := first.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 20, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, made[0].Start(b.ctx)) // started; made[1] is only taken
	status, attempts := b.attemptStatuses(t, made[0].ID)
	require.Equal(t, taskling.BlockStarted, status)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockStarted}, attempts, "live while its execution runs")
	require.NoError(t, first.Complete(b.ctx))

	for _, bl := range made {
		status, attempts = b.attemptStatuses(t, bl.ID)
		require.Equal(t, taskling.BlockDead, status)
		require.Equal(t, []taskling.BlockStatus{taskling.BlockDead}, attempts, "block %d", bl.ID)
	}

	e := b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, onlyDead)
	require.NoError(t, err)
	require.Len(t, got, 2)
	var retaken *taskling.Block // made[1] comes first: it was never started (the poison-block order)
	for _, g := range got {
		if g.ID == made[0].ID {
			retaken = g
		}
	}
	require.NotNil(t, retaken)
	require.NoError(t, retaken.Start(b.ctx))
	status, attempts = b.attemptStatuses(t, made[0].ID)
	require.Equal(t, taskling.BlockStarted, status)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockDead, taskling.BlockStarted}, attempts)
	require.NoError(t, retaken.Complete(b.ctx, 10))
	_, attempts = b.attemptStatuses(t, made[0].ID)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockDead, taskling.BlockCompleted}, attempts)
	_, attempts = b.attemptStatuses(t, made[1].ID)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockDead, taskling.BlockNotStarted}, attempts)
}

// TestAnAttemptOfAKilledExecutionIsDead: its process stops and is judged dead, then another
// execution retakes the block. The first attempt reads dead from the moment the block does, and
// stays dead after the retake even if the first execution's session comes back to life (a paused
// process that resumes before anyone reclaimed its slot: its execution reads running again, but
// its attempt was superseded). Before the fix it read started throughout.
func TestAnAttemptOfAKilledExecutionIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(3))
	owner, err := newClient(t, b.pool, withLimit(3)).StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	made, err := owner.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, made[0].Start(b.ctx))
	id := made[0].ID

	owner.StopHeartbeatForTest()
	b.exec(t, ageSQL, owner.ID(), time.Hour)
	status, attempts := b.attemptStatuses(t, id)
	require.Equal(t, taskling.BlockDead, status)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockDead}, attempts)

	e := b.start(t, nil) // a free slot: the dead owner is not reclaimed
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, onlyDead)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, got[0].Start(b.ctx))
	status, attempts = b.attemptStatuses(t, id)
	require.Equal(t, taskling.BlockStarted, status)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockDead, taskling.BlockStarted}, attempts)

	// The owner's session heartbeats again: its execution reads running, its attempt stays dead.
	b.exec(t, `UPDATE taskling.session SET last_heartbeat = clock_timestamp()
        WHERE id = (SELECT session_id FROM taskling.task_execution WHERE id = $1)`, owner.ID())
	require.Equal(t, taskling.StatusInProgress, b.statusOf(t, owner.ID()))
	_, attempts = b.attemptStatuses(t, id)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockDead, taskling.BlockStarted}, attempts)

	// Reclaimed: a start at the limit takes the owner's slot; still one live attempt.
	b.exec(t, ageSQL, owner.ID(), time.Hour)
	b.start(t, nil)
	b.start(t, nil)
	require.Equal(t, taskling.StatusDead, b.statusOf(t, owner.ID()))
	require.NoError(t, got[0].Fail(b.ctx, "boom"))
	status, attempts = b.attemptStatuses(t, id)
	require.Equal(t, taskling.BlockFailed, status)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockDead, taskling.BlockFailed}, attempts)
}

package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

type startResult struct {
	exec *taskling.Execution
	err  error
	at   time.Time
}

func (b *testBundle) startWaiting(ctx context.Context) <-chan startResult {
	ch := make(chan startResult, 1)
	go func() {
		e, err := b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
		ch <- startResult{e, err, time.Now()}
	}()
	return ch
}

func TestWaiterGetsSlotSoonAfterHolderCompletes(t *testing.T) {
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	waiter := b.startWaiting(b.ctx)
	time.Sleep(500 * time.Millisecond) // the waiter is waiting (past its first polls)
	require.NoError(t, holder.Complete(b.ctx))
	completedAt := time.Now()
	r := <-waiter
	require.NoError(t, r.err)
	require.NoError(t, r.exec.Complete(b.ctx))
	require.Less(t, r.at.Sub(completedAt), 250*time.Millisecond)
}

func TestWaiterGetsSlotOfSilentHolderAfterThreshold(t *testing.T) {
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	holder.StopHeartbeatForTest()
	waiter := b.startWaiting(b.ctx)
	r := <-waiter
	require.NoError(t, r.err)
	defer r.exec.Complete(b.ctx)
	// Measured on the DB clock: from the holder's last heartbeat to the waiter's grant.
	h, err := b.client.Execution(b.ctx, holder.ID())
	require.NoError(t, err)
	require.Equal(t, taskling.StatusDead, h.Status)
	gap := r.exec.StartedAt().Sub(h.LastHeartbeat)
	require.Greater(t, gap, threshold)
	require.Less(t, gap, threshold+250*time.Millisecond)
}

func TestWaitEndsWithContextAndIsRecordedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	b.start(t, nil)
	ctx, cancel := context.WithTimeout(b.ctx, 400*time.Millisecond)
	defer cancel()
	r := <-b.startWaiting(ctx)
	require.ErrorIs(t, r.err, taskling.ErrLimitReached)
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE blocked`))
}

func TestRaisingTheLimitWakesAWaiterAtOnce(t *testing.T) {
	b := setup(t, withLimit(1))
	b.start(t, nil)
	waiter := b.startWaiting(b.ctx)
	time.Sleep(500 * time.Millisecond) // past the waiter's first polls
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: ptr(2)}))
	raisedAt := time.Now()
	r := <-waiter
	require.NoError(t, r.err)
	require.NoError(t, r.exec.Complete(b.ctx))
	require.Less(t, r.at.Sub(raisedAt), 250*time.Millisecond)
}

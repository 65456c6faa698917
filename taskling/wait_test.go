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

// TestWaitsThatTimeOutWhileQueueingLeaveNoTicket: a wait whose context ends while the
// transaction that queues its ticket commits used to cancel that commit midway; when the server
// had committed, the ticket stayed in the queue unknown to its waiter and was offered the slot
// again and again (a new waiter then got a freed slot tens of seconds late).
func TestWaitsThatTimeOutWhileQueueingLeaveNoTicket(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	other := newClient(t, b.pool, withLimit(1))
	holder := b.start(t, nil)
	_, err := other.StartExecution(b.ctx, b.app, b.task, nil) // its session and the task's id, known
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	for i := range 150 {
		wctx, cancel := context.WithTimeout(b.ctx, time.Millisecond+time.Duration(i%15)*time.Millisecond)
		_, err := other.StartExecution(wctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
		cancel()
		require.ErrorIs(t, err, taskling.ErrLimitReached)
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.task_definition WHERE queue <> ''`) == 0
	}, 5*time.Second, 20*time.Millisecond, "every ticket left the queue")
	require.NoError(t, holder.Complete(b.ctx))
	wctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	e, err := b.client.StartExecution(wctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err, "the freed slot goes to the new waiter, not to a forgotten ticket")
	require.NoError(t, e.Complete(b.ctx))
}

package taskling_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// waitIn starts a WaitForSlot start of b's task in client c, with priority.
func (b *testBundle) waitIn(ctx context.Context, c *taskling.Client, priority int) <-chan startResult {
	ch := make(chan startResult, 1)
	go func() {
		e, err := c.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true, Priority: priority})
		ch <- startResult{e, err, time.Now()}
	}()
	return ch
}

// queueLength is the number of tickets in the task's queue.
func (b *testBundle) queueLength(t *testing.T) int {
	return b.count(t, `SELECT coalesce(array_length(string_to_array(nullif(queue, ''), '|'), 1), 0) FROM taskling.task_definition`)
}

func (b *testBundle) waitQueued(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.queueLength(t) == n }, 5*time.Second, 10*time.Millisecond, "%d tickets queued", n)
}

// Waiters in different processes are granted in the order they queued, not in the order their
// processes happen to wake.
func TestWaitersAreGrantedOldestFirstAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	other := newClient(t, b.pool, withLimit(1))
	holder := b.start(t, nil)
	granted := make(chan int, 8) // a waiter whose Complete fails sends twice
	var wg sync.WaitGroup
	defer wg.Wait() // their Completes, before the pool closes
	for i, c := range []*taskling.Client{other, b.client, other, b.client} {
		wg.Go(func() {
			e, err := c.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
			if err == nil {
				granted <- i
				err = e.Complete(b.ctx)
			}
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				granted <- -1
			}
		})
		b.waitQueued(t, i+1)
	}
	require.NoError(t, holder.Complete(b.ctx))
	var order []int
	for range 4 {
		order = append(order, <-granted)
	}
	require.Equal(t, []int{0, 1, 2, 3}, order)
	require.Zero(t, b.queueLength(t))
}

// A higher priority goes first, whatever the order of queueing.
func TestHigherPriorityWaiterGoesFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	low := b.waitIn(b.ctx, b.client, 0)
	b.waitQueued(t, 1)
	high := b.waitIn(b.ctx, b.client, 5)
	b.waitQueued(t, 2)
	require.NoError(t, holder.Complete(b.ctx))
	r := <-high
	require.NoError(t, r.err)
	select {
	case <-low:
		t.Fatal("the low-priority waiter was granted while the high-priority one held the slot")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, r.exec.Complete(b.ctx))
	r = <-low
	require.NoError(t, r.err)
	require.NoError(t, r.exec.Complete(b.ctx))
}

// No barging: while a ticket waits, a start without WaitForSlot is refused even right after a
// slot frees, and the waiter gets the slot.
func TestStartWithoutWaitingDoesNotBargePastTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	other := newClient(t, b.pool, withLimit(1))
	for i := range 5 {
		holder := b.start(t, nil)
		waiter := b.waitIn(b.ctx, other, 0)
		b.waitQueued(t, 1)
		require.NoError(t, holder.Complete(b.ctx))
		_, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
		require.ErrorIs(t, err, taskling.ErrLimitReached, "round %d: a start barged past the waiter", i)
		r := <-waiter
		require.NoError(t, r.err)
		require.NoError(t, r.exec.Complete(b.ctx))
	}
}

// A waiter that gives up leaves the queue at once: the next one is granted as soon as the slot
// frees.
func TestWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	ctx, cancel := context.WithCancel(b.ctx)
	first := b.waitIn(ctx, b.client, 0)
	b.waitQueued(t, 1)
	second := b.waitIn(b.ctx, b.client, 0)
	b.waitQueued(t, 2)
	cancel()
	require.ErrorIs(t, (<-first).err, context.Canceled)
	b.waitQueued(t, 1)
	require.NoError(t, holder.Complete(b.ctx))
	select {
	case r := <-second:
		require.NoError(t, r.err)
		require.NoError(t, r.exec.Complete(b.ctx))
	case <-time.After(time.Second):
		t.Fatal("the second waiter was not granted after the first gave up")
	}
}

// A slot offered to a ticket whose waiter does not take it (its process hangs) passes to the
// next ticket within the ticket's offer window, long before the ticket's threshold.
func TestOfferNotTakenPassesToTheNextWaiter(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	// A hung waiter of a live session (this client's), queued first: threshold 1 h, window 300 ms.
	b.exec(t, `UPDATE taskling.task_definition SET queue = 'W:999999,P:' || (SELECT max(id) FROM taskling.session) ||
',R:0,Q:' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint || ',O:0,D:3600000000,X:300000'`)
	waiter := b.waitIn(b.ctx, b.client, 0)
	b.waitQueued(t, 2)
	require.NoError(t, holder.Complete(b.ctx))
	freed := time.Now()
	r := <-waiter
	require.NoError(t, r.err)
	require.NoError(t, r.exec.Complete(b.ctx))
	require.Less(t, r.at.Sub(freed), 2*time.Second, "waited for the hung ticket for longer than its offer window allows")
}

// TestFairSharesAcrossProcesses is issue 11's fairness test (short profile): 3 clients (as 3
// processes), limit 2, one goroutine each always wanting a slot: each gets a third of the grants,
// within 5 points.
func TestFairSharesAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	clients := []*taskling.Client{b.client, newClient(t, b.pool, withLimit(2)), newClient(t, b.pool, withLimit(2))}
	ctx, cancel := context.WithTimeout(b.ctx, 4*time.Second)
	defer cancel()
	grants := make([]int, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				e, err := c.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("client %d: %v", i, err)
					}
					return
				}
				grants[i]++
				time.Sleep(5 * time.Millisecond)
				if err := e.Complete(context.Background()); err != nil {
					t.Errorf("client %d: complete: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := grants[0] + grants[1] + grants[2]
	require.Positive(t, total)
	shares := make([]string, len(grants))
	for i, n := range grants {
		share := 100 * float64(n) / float64(total)
		shares[i] = fmt.Sprintf("%.1f%%", share)
		require.InDelta(t, 33.3, share, 5, "client %d's share of %d grants: %v", i, total, grants)
	}
	t.Logf("shares of %d grants: %v", total, shares)
}

// LastExecutions shows the starts queued right now first, with their place in line.
func TestLastExecutionsShowsWaitersWithTheirPosition(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	other := newClient(t, b.pool, &taskling.Config{HostName: "other-host", Defaults: fast})
	holder := b.start(t, nil)
	first := b.waitIn(b.ctx, other, 0)
	b.waitQueued(t, 1)
	second := b.waitIn(b.ctx, b.client, 0)
	b.waitQueued(t, 2)

	infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 10)
	require.NoError(t, err)
	require.Len(t, infos, 3)
	require.Equal(t, []taskling.Status{taskling.StatusWaiting, taskling.StatusWaiting, taskling.StatusInProgress},
		[]taskling.Status{infos[0].Status, infos[1].Status, infos[2].Status})
	require.Equal(t, []int{1, 2, 0}, []int{infos[0].Position, infos[1].Position, infos[2].Position})
	require.Equal(t, []string{"other-host", "test-host"}, []string{infos[0].Host, infos[1].Host})
	require.Equal(t, holder.ID(), infos[2].ID)
	require.False(t, infos[0].StartedAt.After(infos[1].StartedAt), "queued first")

	infos, err = b.client.LastExecutions(b.ctx, b.app, b.task, 1)
	require.NoError(t, err)
	require.Len(t, infos, 1, "waiters count towards n")

	require.NoError(t, holder.Complete(b.ctx))
	for _, ch := range []<-chan startResult{first, second} {
		r := <-ch
		require.NoError(t, r.err)
		require.NoError(t, r.exec.Complete(b.ctx))
	}
	infos, err = b.client.LastExecutions(b.ctx, b.app, b.task, 10)
	require.NoError(t, err)
	for _, i := range infos {
		require.NotEqual(t, taskling.StatusWaiting, i.Status, "nobody waits any more")
	}
}

package taskling_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestQueuedSubmissionsAreCountedApartFromStartsWaitingForASlot is issue 40 item 4: with two
// submissions queued for key globex and one without a key, and no Work loop, a task read
// "Waiting: 0" and its key globex "WAITING 0": Waiting counts the starts waiting for a slot, not
// the submissions waiting to start. QueuedSubmissions counts those, for the task (in Task and in
// Tasks, as taskling_submissions{status="waiting"} does) and for each key.
func TestQueuedSubmissionsAreCountedApartFromStartsWaitingForASlot(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	waitCtx, stopWaiting := context.WithCancel(b.ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if e, err := b.client.StartExecution(waitCtx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true}); err == nil {
			_ = e.Complete(context.Background())
		}
	}()
	t.Cleanup(func() { stopWaiting(); <-waited })
	require.Eventually(t, func() bool {
		d, err := b.client.Task(b.ctx, b.app, b.task)
		return err == nil && d.Waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the start waits for the slot")
	var globex []int64
	for range 2 {
		id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: "globex"})
		require.NoError(t, err)
		globex = append(globex, id)
	}
	_, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)

	d, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, 1, d.Waiting, "the start waiting for a slot")
	require.Equal(t, 3, d.QueuedSubmissions, "the submissions waiting to start")
	keys := map[string]taskling.KeyInfo{}
	for _, k := range d.Keys {
		keys[k.Key] = k
	}
	g := keys["globex"]
	require.Equal(t, [3]int{0, 0, 2}, [3]int{g.Holders, g.Waiting, g.QueuedSubmissions},
		"globex has no holder and no start waiting, and two submissions queued")
	require.Equal(t, 1, keys[""].Holders)
	require.Equal(t, 1, keys[""].Waiting)
	require.Equal(t, 1, keys[""].QueuedSubmissions)
	require.Equal(t, 2, d.KeysTotal)

	page, err := b.client.Tasks(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	require.Equal(t, 1, page.Tasks[0].Waiting)
	require.Equal(t, 3, page.Tasks[0].QueuedSubmissions)

	// A cancelled submission is no longer queued.
	_, err = b.client.CancelSubmission(b.ctx, globex[0], "")
	require.NoError(t, err)
	d, err = b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, 2, d.QueuedSubmissions)
	require.Equal(t, "globex", d.Keys[1].Key, "most cost in use, then most waiting, then most queued first")
	require.Equal(t, 1, d.Keys[1].QueuedSubmissions)

	// Once they run, none is queued: the worker's starts wait for the slot meanwhile.
	stopWaiting()
	<-waited
	require.NoError(t, holder.Complete(b.ctx))
	b.work(t, b.client, func(context.Context, *taskling.Execution) error { return nil }, nil)
	require.Eventually(t, func() bool {
		d, err := b.client.Task(b.ctx, b.app, b.task)
		return err == nil && d.QueuedSubmissions == 0 && len(d.Keys) == 0
	}, 15*time.Second, 20*time.Millisecond, "every submission ran")
}

// TestTheTaskSummaryAgreesWithItsSlotsDuringChurn is issue 40 item 12: the task page once showed
// "Slots in use 3 / 4" above a slots table of 2 rows, the summary and the slots read apart while
// holders came and went. Read in one snapshot, SlotsUsed is the number of slots whose holder is
// alive, however fast they change.
func TestTheTaskSummaryAgreesWithItsSlotsDuringChurn(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(3))
	ctx, stop := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				e, err := b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
				if err != nil {
					continue
				}
				_ = e.Complete(context.WithoutCancel(ctx))
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	mismatches, busy := 0, 0
	for i := 0; i < 150; i++ {
		d, err := b.client.Task(b.ctx, b.app, b.task)
		if errors.Is(err, context.Canceled) {
			break
		}
		require.NoError(t, err)
		alive := 0
		for _, s := range d.Slots {
			if s.Holder != nil && s.Holder.Alive {
				alive++
			}
		}
		if alive != d.SlotsUsed {
			mismatches++
			t.Logf("read %d: summary %d in use, %d slots with a live holder", i, d.SlotsUsed, alive)
		}
		if alive > 0 {
			busy++
		}
	}
	require.Zero(t, mismatches, "the summary and the slots disagreed")
	require.Positive(t, busy, "the slots were in use while read")
}

// TestAnExecutionNamesTheSubmissionItRan is issue 40 item 5: an execution's page could not link
// to the submission it ran. Every execution read carries its submission and attempt (0 for one
// that ran none).
func TestAnExecutionNamesTheSubmissionItRan(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	plain := b.start(t, nil)
	require.NoError(t, plain.Complete(b.ctx))
	id, err := b.client.Submit(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	ran := make(chan int64, 1)
	b.work(t, b.client, func(_ context.Context, e *taskling.Execution) error {
		ran <- e.ID()
		return nil
	}, nil)
	exec := <-ran
	b.waitStatus(t, id, taskling.SubmissionCompleted)

	x, err := b.client.Execution(b.ctx, exec)
	require.NoError(t, err)
	require.Equal(t, id, x.SubmissionID)
	require.Equal(t, 1, x.Attempt)
	x, err = b.client.Execution(b.ctx, plain.ID())
	require.NoError(t, err)
	require.Zero(t, x.SubmissionID)
	require.Zero(t, x.Attempt)

	page, err := b.client.Executions(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.Len(t, page.Executions, 2)
	byID := map[int64]taskling.ExecutionInfo{}
	for _, e := range page.Executions {
		byID[e.ID] = e
	}
	require.Equal(t, id, byID[exec].SubmissionID)
	require.Equal(t, 1, byID[exec].Attempt)
	require.Zero(t, byID[plain.ID()].SubmissionID)
	last, err := b.client.LastExecutions(b.ctx, b.app, b.task, 1)
	require.NoError(t, err)
	require.Equal(t, id, last[0].SubmissionID)
}

package taskling_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// section takes e's critical section in the background; the result arrives on the channel.
func section(ctx context.Context, e *taskling.Execution, timeout time.Duration) <-chan sectionResult {
	out := make(chan sectionResult, 1)
	go func() {
		s, err := e.CriticalSection(ctx, timeout)
		out <- sectionResult{s, err}
	}()
	return out
}

type sectionResult struct {
	s   *taskling.CriticalSection
	err error
}

// waitersOf is the number of waiters queued for app/task's critical section.
func (b *testBundle) sectionWaiters(t *testing.T) int {
	t.Helper()
	infos, err := b.client.LastExecutions(b.ctx, b.app, b.task+taskling.SectionSuffix, 20)
	require.NoError(t, err)
	n := 0
	for _, i := range infos {
		if i.Status == taskling.StatusWaiting {
			n++
		}
	}
	return n
}

func TestCriticalSectionIsExclusiveAndServedInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(3))
	e1, e2, e3 := b.start(t, nil), b.start(t, nil), b.start(t, nil)
	s1, err := e1.CriticalSection(b.ctx, time.Second)
	require.NoError(t, err)
	_, err = e1.CriticalSection(b.ctx, time.Second)
	require.ErrorIs(t, err, taskling.ErrSectionHeld)

	r2 := section(b.ctx, e2, 0)
	require.Eventually(t, func() bool { return b.sectionWaiters(t) == 1 }, 5*time.Second, 5*time.Millisecond)
	r3 := section(b.ctx, e3, 0)
	require.Eventually(t, func() bool { return b.sectionWaiters(t) == 2 }, 5*time.Second, 5*time.Millisecond)

	require.NoError(t, s1.Release(b.ctx))
	got := <-r2
	require.NoError(t, got.err)
	select {
	case <-r3:
		t.Fatal("two holders of one critical section")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, e2.Complete(b.ctx)) // Complete releases the section too
	got3 := <-r3
	require.NoError(t, got3.err)
	require.NoError(t, got3.s.Release(b.ctx))
	require.NoError(t, got3.s.Release(b.ctx), "releasing twice is a no-op")
}

func TestACriticalSectionWaiterThatGivesUpDoesNotDelayTheNext(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(3))
	e1, e2, e3 := b.start(t, nil), b.start(t, nil), b.start(t, nil)
	s1, err := e1.CriticalSection(b.ctx, 0)
	require.NoError(t, err)
	r2 := section(b.ctx, e2, 300*time.Millisecond)
	require.Eventually(t, func() bool { return b.sectionWaiters(t) == 1 }, 5*time.Second, 5*time.Millisecond)
	r3 := section(b.ctx, e3, 0)
	got2 := <-r2
	require.ErrorIs(t, got2.err, taskling.ErrLimitReached)
	require.ErrorIs(t, got2.err, context.DeadlineExceeded)

	released := time.Now()
	require.NoError(t, s1.Release(b.ctx))
	got3 := <-r3
	require.NoError(t, got3.err)
	// Taskling left a waiter that gave up at the head of the queue; here the next one is served
	// as the section frees (a notification, not a poll or an offer timing out).
	require.Less(t, time.Since(released), time.Second)
}

func TestADeadHoldersCriticalSectionIsTaken(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	other := newClient(t, b.pool, withLimit(2))
	owner, err := other.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	s, err := owner.CriticalSection(b.ctx, 0)
	require.NoError(t, err)

	e := b.start(t, nil)
	_, err = e.CriticalSection(b.ctx, 200*time.Millisecond)
	require.ErrorIs(t, err, taskling.ErrLimitReached)

	// The owner's process stops heartbeating: after its threshold (1 s) the section is taken.
	owner.StopHeartbeatForTest()
	mine, err := e.CriticalSection(b.ctx, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Context().Err() != nil }, 5*time.Second, 10*time.Millisecond)
	// The dead holder's release is identity-checked: it does not free the new holder's section.
	require.ErrorIs(t, s.Release(b.ctx), taskling.ErrLeaseLost)
	e2 := b.start(t, nil)
	_, err = e2.CriticalSection(b.ctx, 200*time.Millisecond)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	require.NoError(t, mine.Release(b.ctx))
}

func TestCriticalSectionNamesAreReserved(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.StartExecution(b.ctx, b.app, "task"+taskling.SectionSuffix, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	_, err = b.client.Submit(b.ctx, b.app, "task"+taskling.SectionSuffix, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	limit := 2
	err = b.client.UpdateTaskSettings(b.ctx, b.app, "task"+taskling.SectionSuffix, taskling.SettingsUpdate{ConcurrencyLimit: &limit})
	require.True(t, errors.Is(err, taskling.ErrInvalidArgument), "an operator cannot raise a section's limit: %v", err)
}

func TestACriticalSectionGrantedAfterItsExecutionCompletedIsGivenBack(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	e1, e2 := b.start(t, nil), b.start(t, nil)
	s1, err := e1.CriticalSection(b.ctx, 0)
	require.NoError(t, err)
	r2 := section(b.ctx, e2, 10*time.Second)
	require.Eventually(t, func() bool { return b.sectionWaiters(t) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, e2.Complete(b.ctx)) // while its section wait goes on
	require.NoError(t, s1.Release(b.ctx))
	got := <-r2
	require.ErrorIs(t, got.err, taskling.ErrExecutionCompleted)
	e3 := b.start(t, nil)
	s3, err := e3.CriticalSection(b.ctx, 2*time.Second)
	require.NoError(t, err, "the section was given back, not left held")
	require.NoError(t, s3.Release(b.ctx))
}

func TestASectionWaitEndsWhenItsExecutionLosesItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	holder := b.start(t, nil)
	s, err := holder.CriticalSection(b.ctx, 0)
	require.NoError(t, err)
	short := newClient(t, b.pool, &taskling.Config{HostName: "short", Defaults: taskling.TaskSettings{ConcurrencyLimit: 2,
		DeathMode: taskling.DeathModeOverride, OverrideThreshold: 600 * time.Millisecond}})
	e, err := short.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	began := time.Now()
	_, err = e.CriticalSection(b.ctx, 20*time.Second)
	require.ErrorIs(t, err, taskling.ErrLeaseLost, "an execution that cannot hold anything stops waiting")
	require.Less(t, time.Since(began), 10*time.Second)
	require.NoError(t, s.Release(b.ctx))
}

func TestOneCriticalSectionCallAtATimePerExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	holder, e := b.start(t, nil), b.start(t, nil)
	s, err := holder.CriticalSection(b.ctx, 0)
	require.NoError(t, err)
	first := section(b.ctx, e, 5*time.Second)
	require.Eventually(t, func() bool { return b.sectionWaiters(t) == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err = e.CriticalSection(b.ctx, time.Second)
	require.ErrorIs(t, err, taskling.ErrSectionHeld, "a second call while the first waits")
	require.NoError(t, s.Release(b.ctx))
	got := <-first
	require.NoError(t, got.err)
	require.NoError(t, got.s.Release(b.ctx))
}

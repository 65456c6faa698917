package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// A process paused past its lease deadline (SIGSTOP) resumes with its lease timer and its work's
// goroutine both runnable. Whichever runs first, the work must see its context cancelled: found by
// the chaos tests (integration_test), where a resumed holder did a unit of work after a waiter had
// been granted its slot.
func TestContextIsCancelledPastTheLeaseDeadlineBeforeItsTimerRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))

	e := b.start(t, nil)
	require.NoError(t, e.Context().Err())
	e.PassLeaseDeadlineForTest()
	select {
	case <-e.Context().Done():
	default:
		t.Fatal("Done is not closed past the lease deadline")
	}
	require.ErrorIs(t, context.Cause(e.Context()), taskling.ErrLeaseLost)

	e2 := b.start(t, nil)
	derived, cancel := context.WithCancel(e2.Context())
	defer cancel()
	e2.PassLeaseDeadlineForTest()
	require.ErrorIs(t, e2.Context().Err(), context.Canceled, "Err past the lease deadline")
	require.ErrorIs(t, context.Cause(e2.Context()), taskling.ErrLeaseLost)
	require.ErrorIs(t, derived.Err(), context.Canceled, "a derived context is cancelled with it")
}

// Run's function gets a context derived from the execution's: it must see the lease deadline
// the same way.
func TestRunContextIsCancelledPastTheLeaseDeadlineBeforeItsTimerRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	var sawErr error
	err := b.client.Run(b.ctx, b.app, b.task, func(ctx context.Context, e *taskling.Execution) error {
		e.PassLeaseDeadlineForTest()
		sawErr = ctx.Err()
		return nil
	}, nil)
	require.ErrorIs(t, sawErr, context.Canceled, "Run's context past the lease deadline")
	require.ErrorIs(t, err, taskling.ErrLeaseLost)
}

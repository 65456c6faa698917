package taskling_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// The godoc of StartOptions.Idempotent: a start returns ErrDuplicateReference while an execution
// with the same reference runs or after one completed; it is allowed again after a failed or dead
// one. One test per case, each under both isolation levels of the token transactions.

var isolations = []struct {
	name  string
	level taskling.Isolation
}{{"read committed", taskling.IsolationReadCommitted}, {"serializable", taskling.IsolationSerializable}}

// eachIsolation runs f on a fresh database under each isolation level, with a limit of 1.
func eachIsolation(t *testing.T, f func(t *testing.T, b *testBundle, cfg *taskling.Config)) {
	t.Helper()
	for _, iso := range isolations {
		t.Run(iso.name, func(t *testing.T) {
			t.Parallel()
			cfg := withLimit(1)
			cfg.Isolation = iso.level
			f(t, setup(t, cfg), cfg)
		})
	}
}

func idempotent(ref string) *taskling.StartOptions {
	return &taskling.StartOptions{ReferenceValue: ref, Idempotent: true}
}

// statusOf is an execution's status as the history reads it.
func (b *testBundle) statusOf(t *testing.T, id int64) taskling.Status {
	t.Helper()
	d, err := b.client.Execution(b.ctx, id)
	require.NoError(t, err)
	return d.Status
}

func TestIdempotentReferenceIsRefusedWhileItsExecutionRuns(t *testing.T) {
	t.Parallel()
	eachIsolation(t, func(t *testing.T, b *testBundle, _ *taskling.Config) {
		cfg := withLimit(2) // a free slot: the refusal is the reference's, not the limit's
		b.client = newClient(t, b.pool, cfg)
		first := b.start(t, idempotent("run.csv"))
		require.ErrorIs(t, b.denied(t, idempotent("run.csv")), taskling.ErrDuplicateReference)
		require.NoError(t, first.Checkpoint(b.ctx, "still running"))
		require.ErrorIs(t, b.denied(t, idempotent("run.csv")), taskling.ErrDuplicateReference, "still running")
		b.start(t, idempotent("other.csv")) // another reference is not affected
	})
}

func TestIdempotentReferenceIsRefusedAfterItsExecutionCompleted(t *testing.T) {
	t.Parallel()
	eachIsolation(t, func(t *testing.T, b *testBundle, _ *taskling.Config) {
		e := b.start(t, idempotent("done.csv"))
		require.NoError(t, e.RecordError(b.ctx, "row 3 was odd; went on", false)) // an error recorded, not a failure
		require.NoError(t, e.Complete(b.ctx))
		require.Equal(t, taskling.StatusCompleted, b.statusOf(t, e.ID()))
		require.ErrorIs(t, b.denied(t, idempotent("done.csv")), taskling.ErrDuplicateReference)
		require.NoError(t, b.client.Run(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { return nil },
			idempotent("done-by-run.csv")))
		require.ErrorIs(t, b.denied(t, idempotent("done-by-run.csv")), taskling.ErrDuplicateReference)
	})
}

// TestIdempotentReferenceIsAllowedAgainAfterRecordErrorMarkedItFailed: issue 22 item 3. Before
// the fix, Complete released with Failed=false, so the claim was marked succeeded and the second
// start was refused with ErrDuplicateReference.
func TestIdempotentReferenceIsAllowedAgainAfterRecordErrorMarkedItFailed(t *testing.T) {
	t.Parallel()
	eachIsolation(t, func(t *testing.T, b *testBundle, _ *taskling.Config) {
		e := b.start(t, idempotent("bad.csv"))
		require.NoError(t, e.RecordError(b.ctx, "boom", true))
		require.NoError(t, e.Complete(b.ctx))
		require.Equal(t, taskling.StatusFailed, b.statusOf(t, e.ID()))
		again := b.start(t, idempotent("bad.csv"))
		require.NoError(t, again.Complete(b.ctx))
		require.ErrorIs(t, b.denied(t, idempotent("bad.csv")), taskling.ErrDuplicateReference, "the retry succeeded")

		// The same inside Run: fn marks its execution failed and returns nil.
		err := b.client.Run(b.ctx, b.app, b.task, func(ctx context.Context, e *taskling.Execution) error {
			return e.RecordError(ctx, "boom", true)
		}, idempotent("bad-in-run.csv"))
		require.NoError(t, err)
		b.start(t, idempotent("bad-in-run.csv"))
	})
}

func TestIdempotentReferenceIsAllowedAgainAfterRunsFunctionFailed(t *testing.T) {
	t.Parallel()
	eachIsolation(t, func(t *testing.T, b *testBundle, _ *taskling.Config) {
		err := b.client.Run(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { return errors.New("boom") },
			idempotent("bad.csv"))
		require.EqualError(t, err, "boom")
		err = b.client.Run(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { panic("kaboom") },
			idempotent("bad.csv"))
		var pe *taskling.PanicError
		require.ErrorAs(t, err, &pe)
		infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 2)
		require.NoError(t, err)
		for _, info := range infos {
			require.Equal(t, taskling.StatusFailed, info.Status)
		}
		require.NoError(t, b.client.Run(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { return nil },
			idempotent("bad.csv")))
		require.ErrorIs(t, b.denied(t, idempotent("bad.csv")), taskling.ErrDuplicateReference, "the retry succeeded")
	})
}

func TestIdempotentReferenceIsAllowedAgainAfterItsExecutionDied(t *testing.T) {
	t.Parallel()
	eachIsolation(t, func(t *testing.T, b *testBundle, cfg *taskling.Config) {
		dead := b.startDead(t, cfg, idempotent("dead.csv"))
		again := b.start(t, idempotent("dead.csv")) // reclaims the dead one's slot (limit 1)
		require.Equal(t, taskling.StatusDead, b.statusOf(t, dead.ID()))
		require.ErrorIs(t, b.denied(t, idempotent("dead.csv")), taskling.ErrDuplicateReference, "while the retry runs")
		require.NoError(t, again.Complete(b.ctx))

		// Reclaimed by a start without the reference, then the reference comes back.
		dead = b.startDead(t, cfg, idempotent("dead-2.csv"))
		other := b.start(t, nil)
		require.Equal(t, taskling.StatusDead, b.statusOf(t, dead.ID()))
		require.NoError(t, other.Complete(b.ctx))
		b.start(t, idempotent("dead-2.csv"))
	})
}

func TestIdempotentReferenceIsAllowedAfterABlockedStart(t *testing.T) {
	t.Parallel()
	eachIsolation(t, func(t *testing.T, b *testBundle, _ *taskling.Config) {
		holder := b.start(t, nil)
		require.ErrorIs(t, b.denied(t, idempotent("late.csv")), taskling.ErrLimitReached)
		infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 1)
		require.NoError(t, err)
		require.Equal(t, taskling.StatusBlocked, infos[0].Status)
		require.Equal(t, "late.csv", infos[0].ReferenceValue)
		require.NoError(t, holder.Complete(b.ctx))
		e := b.start(t, idempotent("late.csv"))

		// A start refused as a duplicate is blocked too, and does not take the reference over.
		require.ErrorIs(t, b.denied(t, idempotent("late.csv")), taskling.ErrDuplicateReference)
		require.NoError(t, e.RecordError(b.ctx, "boom", true))
		require.NoError(t, e.Complete(b.ctx))
		b.start(t, idempotent("late.csv"))
	})
}

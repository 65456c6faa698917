package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestFailedClaimsUpgradeFreesReferencesOfFailedExecutions: 0014 on a database of 0013 where a
// release of the previous release marked the reference of an execution that RecordError had
// marked failed as succeeded (its end recorded as completed): the reference is allowed again
// after the upgrade, while one that did succeed stays refused, and a holder started before the
// upgrade completes.
func TestFailedClaimsUpgradeFreesReferencesOfFailedExecutions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 13))
	old := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, withLimit(2)), app: "app", task: "task"}
	done := old.start(t, idempotent("done.csv"))
	require.NoError(t, done.Complete(ctx))
	failed := old.start(t, idempotent("bad.csv"))
	// RecordError(ctx, "boom", true) as the previous release stored it (this binary's statement
	// needs migration 0018).
	old.exec(t, `UPDATE taskling.task_execution SET failed = true WHERE id = $1`, failed.ID())
	require.NoError(t, failed.Complete(ctx))
	// What a release of the previous release wrote for it.
	old.exec(t, `UPDATE taskling.reference_claim SET succeeded = true WHERE execution_id = $1`, failed.ID())
	old.exec(t, `UPDATE taskling.execution_end SET outcome = 1 WHERE execution_id = $1`, failed.ID())
	require.ErrorIs(t, old.denied(t, idempotent("bad.csv")), taskling.ErrDuplicateReference, "the defect, before the upgrade")
	holder := old.start(t, idempotent("running.csv"))

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, withLimit(2)), app: "app", task: "task"}
	require.Equal(t, taskling.StatusFailed, b.statusOf(t, failed.ID()))
	require.ErrorIs(t, b.denied(t, idempotent("done.csv")), taskling.ErrDuplicateReference)
	require.ErrorIs(t, b.denied(t, idempotent("running.csv")), taskling.ErrDuplicateReference)
	again := b.start(t, idempotent("bad.csv"))
	require.NoError(t, again.Complete(ctx))
	require.NoError(t, holder.Complete(ctx))
	require.ErrorIs(t, b.denied(t, idempotent("running.csv")), taskling.ErrDuplicateReference, "completed after the upgrade")
}

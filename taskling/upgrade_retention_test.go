package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestRetentionUpgradeCleansOldHistoryAndKeepsHolders: 0010 (retention) on a database of 0009 in
// use: history from before the upgrade is cleaned by the default keep settings, a holder started
// before it keeps its slot and completes, and a reference that succeeded before it stays refused
// once its execution is deleted.
func TestRetentionUpgradeCleansOldHistoryAndKeepsHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 9))
	old := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(2))), app: "app", task: "task"}
	e, err := old.client.StartExecution(ctx, old.app, old.task, &taskling.StartOptions{ReferenceValue: "r-1", Idempotent: true})
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	old.age(t, e.ID(), 30*day)
	old.run(t, true, 50*day)
	holder := old.start(t, nil)
	old.age(t, holder.ID(), 30*day)

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(2))), app: "app", task: "task"}
	got := b.cleanup(t, b.client)
	require.Equal(t, taskling.CleanupCounts{Completed: 1, Failed: 1}, got)
	require.Equal(t, []int64{holder.ID()}, b.executionIDs(t))
	_, err = b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{ReferenceValue: "r-1", Idempotent: true})
	require.ErrorIs(t, err, taskling.ErrDuplicateReference)
	require.NoError(t, holder.Context().Err())
	require.NoError(t, holder.Complete(ctx))
}

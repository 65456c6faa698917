package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestPrincipalsUpgradeKeepsTheTrail: 0016 (the principal of operator changes) on a database of
// the version before, with a task, its overrides and its trail: the old changes stay, without a
// principal; a binary older than the migration still records changes (without one); a change
// of this one records its principal beside its by.
func TestPrincipalsUpgradeKeepsTheTrail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 15))

	const app, task = "app", "task"
	old := newClient(t, pool, steady(2))
	require.NoError(t, old.Run(ctx, app, task, func(context.Context, *taskling.Execution) error { return nil }, nil))
	// What a binary of the version before writes: an override and its change.
	oldChange := `INSERT INTO taskling.operator_change (task_id, changed_by, field, old_value, new_value)
SELECT id, $1, 'concurrency_limit', NULL, '1' FROM taskling.task_definition`
	_, err := pool.Exec(ctx, `UPDATE taskling.task_definition SET concurrency_limit = 1`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, oldChange, "alice (api@10.0.0.5)")
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, steady(2)), app: app, task: task}
	_, err = pool.Exec(ctx, oldChange, "bob (api@10.0.0.6)") // an older binary, after the migration
	require.NoError(t, err)
	three := 3
	require.NoError(t, b.client.As(taskling.Operator{Name: "carol", Note: "OPS-7"}).UpdateTaskSettings(ctx, app, task, taskling.SettingsUpdate{ConcurrencyLimit: &three}))
	require.Equal(t, []who{
		{"concurrency_limit", "", "alice (api@10.0.0.5)"},
		{"concurrency_limit", "", "bob (api@10.0.0.6)"},
		{"concurrency_limit", "carol", "OPS-7"},
	}, b.who(t))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM taskling.operator_change WHERE principal IS NULL`))
	info, err := b.client.Task(ctx, app, task)
	require.NoError(t, err)
	require.Equal(t, 3, *info.Overrides.ConcurrencyLimit)
	b.start(t, nil)
}

package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestOperatorChangesUpgradeKeepsHoldersOverridesAndHistory: 0011 (operator changes, retirement)
// on a database of 0010 in use: a holder started before the upgrade keeps its slot and
// completes; overrides set before it (limit, enabled, a keep setting) stay in force and are the
// old values of the first recorded changes; the history stays; the task can be retired and
// unretired, its enabled override coming back.
func TestOperatorChangesUpgradeKeepsHoldersOverridesAndHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 10))

	const app, task = "app", "task"
	old := newClient(t, pool, steady(2))
	require.NoError(t, old.Run(ctx, app, task, func(context.Context, *taskling.Execution) error { return nil }, nil))
	holder, err := old.StartExecution(ctx, app, task, nil)
	require.NoError(t, err)
	// Overrides as a binary of 0010 stores them.
	_, err = pool.Exec(ctx, `UPDATE taskling.task_definition SET concurrency_limit = 1, enabled = true`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO taskling.retention (task_id, override_completed) SELECT id, interval '30 days' FROM taskling.task_definition
ON CONFLICT (task_id) DO UPDATE SET override_completed = excluded.override_completed`)
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, steady(2)), app: app, task: task}
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "the holder keeps its slot under the limit override")
	info, err := b.client.Task(ctx, app, task)
	require.NoError(t, err)
	require.Nil(t, info.Retired)
	require.Equal(t, 1, *info.Overrides.ConcurrencyLimit)
	require.Empty(t, b.changes(t), "no change recorded before the upgrade")
	require.Equal(t, []string{"app/task"}, b.listed(t, ""))

	three, week := 3, 7*day
	require.NoError(t, b.client.UpdateTaskSettings(ctx, app, task, taskling.SettingsUpdate{ConcurrencyLimit: &three, KeepCompleted: &week, By: "alice"}))
	require.NoError(t, holder.Complete(ctx))
	require.NoError(t, b.client.RetireTask(ctx, app, task, "ops"))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrTaskRetired)
	require.NoError(t, b.client.UnretireTask(ctx, app, task, "ops"))
	info, err = b.client.Task(ctx, app, task)
	require.NoError(t, err)
	require.True(t, *info.Overrides.Enabled)
	b.start(t, nil)
	require.Equal(t, []change{
		{"concurrency_limit", "1", "3", "alice"},
		{"keep_completed", "30d", "7d", "alice"},
		{"retired", "no", "yes", "ops"},
		{"retired", "yes", "no", "ops"},
	}, b.newChanges(t, 0))
	history, err := b.client.LastExecutions(ctx, app, task, 10)
	require.NoError(t, err)
	require.Len(t, history, 4, "two runs before the upgrade, a denial and a run after")
}

package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestDeclarationUpgradeRecordsTheNextStartsDeclaration: 0015 (declarations) on a database in use
// before it, holding a liveness override that the hosts' settings do not fit (stored by an older
// release, which did not check it): the holder started before the upgrade completes, the task
// shows nothing declared until a host starts it, and that host's start records its declaration,
// fails naming both sources, and flags the task.
func TestDeclarationUpgradeRecordsTheNextStartsDeclaration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 14))
	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(2))), app: "app", task: "task"}
	holder := b.start(t, nil) // its declaration cannot be recorded yet: the start goes on
	b.exec(t, `UPDATE taskling.task_definition SET keep_alive_death_threshold = interval '300 milliseconds'`)

	require.NoError(t, migrations.Up(ctx, pool))

	info, err := b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, taskling.LimitSourceNone, info.EnabledSource)
	require.True(t, info.Enabled)
	require.NoError(t, info.SettingsError, "nothing declared: nothing to judge")
	require.NoError(t, holder.Complete(ctx))

	host := newClient(t, pool, &taskling.Config{HostName: "host-a"}) // 5 s interval
	_, err = host.StartExecution(ctx, b.app, b.task, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.ErrorContains(t, err, "KeepAliveDeathThreshold (300ms, operator override) must be at least twice KeepAliveInterval (5s, declared by host-a)")
	info, err = b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, taskling.LimitSourceDeclared, info.EnabledSource)
	require.ErrorContains(t, info.SettingsError, "declared by host-a")

	require.NoError(t, b.client.ClearOverrides(ctx, b.app, b.task))
	e, err := host.StartExecution(ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
}

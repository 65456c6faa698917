package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestAPISessionsUpgradeKeepsTasksAndTrail: 0017 (the sign-in sessions' table) on a database of
// the version before in use: a holder keeps its slot, overrides and the trail stay, and
// sessions start, are found and end.
func TestAPISessionsUpgradeKeepsTasksAndTrail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 16))

	const app, task = "app", "task"
	old := newClient(t, pool, steady(1))
	holder, err := old.StartExecution(ctx, app, task, nil)
	require.NoError(t, err)
	one := 1
	require.NoError(t, old.As(taskling.Operator{Name: "alice"}).UpdateTaskSettings(ctx, app, task, taskling.SettingsUpdate{ConcurrencyLimit: &one}))

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, steady(1)), app: app, task: task}
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "the holder keeps its slot")
	require.Equal(t, []who{{"concurrency_limit", "alice", "alice"}}, b.who(t))
	id, err := b.client.APISessions().Start(ctx, "alice", "c", time.Hour)
	require.NoError(t, err)
	s, err := b.client.APISessions().Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "alice", s.Principal)
	require.NoError(t, b.client.APISessions().End(ctx, id))
	require.NoError(t, holder.Complete(ctx))
	b.start(t, nil)
}

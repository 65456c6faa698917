package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestStripesUpgradeServesTheHoldersAndWaitersOfBefore: 0019 (stripe locks, grant protocol 5) on
// a database of 0018 with a holder and a waiter queued before it: the holder completes, the
// waiter gets the slot with the next fence, and the transactions after the migration take their
// stripes (protocol 5 is recorded; a start and a completion on the new schema work).
func TestStripesUpgradeServesTheHoldersAndWaitersOfBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 18))
	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(1))), app: "app", task: "task"}
	holder := b.start(t, nil)
	waiter := newClient(t, pool, noAutoCleanup(withLimit(1)))
	first := b.waitIn(ctx, waiter, 0)
	firstTicket(t, b)

	require.NoError(t, migrations.UpTo(ctx, pool, 19))
	require.Equal(t, 5, b.count(t, `SELECT version FROM taskling.protocol`))
	require.GreaterOrEqual(t, taskling.ProtocolVersion, 5)
	require.NoError(t, holder.Complete(ctx))
	got := <-first
	require.NoError(t, got.err)
	require.Equal(t, holder.FencingToken()+1, got.exec.FencingToken())
	require.NoError(t, got.exec.Complete(ctx))

	again, err := taskling.NewClient(pool, &taskling.Config{HostName: "after", Defaults: fast})
	require.NoError(t, err)
	defer again.Close()
	require.NoError(t, again.Run(ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { return nil }, nil))
}

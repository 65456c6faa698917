package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestKeysUpgradeServesTheHoldersWaitersAndSubmissionsOfBefore: 0022 (keys and costs, grant
// protocol 6) on a database of 0021 in use. A holder started before the upgrade keeps its slot
// and completes; a waiter queued in the task row before it is granted the slot (by the
// transaction that frees it) with the next fence; a submission made before it runs under the
// keyed settings of a host of the new release, as key "", cost 1; keyed starts then keep their
// key's limit.
func TestKeysUpgradeServesTheHoldersWaitersAndSubmissionsOfBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 21))
	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(2))), app: "app", task: "task"}
	holder := b.start(t, nil)
	second := b.start(t, nil)
	waiter := newClient(t, pool, noAutoCleanup(withLimit(2)))
	first := b.waitIn(ctx, waiter, 0)
	firstTicket(t, b)
	sub, err := b.client.Submit(ctx, b.app, b.task, &taskling.SubmitOptions{ReferenceValue: "before"})
	require.NoError(t, err)
	_, err = b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{Key: "x"})
	require.ErrorContains(t, err, "keys and costs need migration 0022", "a keyed start waits for the migration")

	require.NoError(t, migrations.UpTo(ctx, pool, 22))
	require.Equal(t, 6, b.count(t, `SELECT version FROM taskling.protocol`))
	require.GreaterOrEqual(t, taskling.ProtocolVersion, 6)
	require.NoError(t, holder.Complete(ctx))
	got := <-first
	require.NoError(t, got.err)
	require.Equal(t, second.FencingToken()+1, got.exec.FencingToken())
	require.NoError(t, got.exec.Complete(ctx))
	require.NoError(t, second.Complete(ctx))

	keyed := newClient(t, pool, noAutoCleanup(withKeys(2, 1, nil)))
	x, err := keyed.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{Key: "x"})
	require.NoError(t, err)
	_, err = keyed.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{Key: "x"})
	require.ErrorIs(t, err, taskling.ErrKeyLimitReached)
	ran := make(chan string, 1)
	b.work(t, keyed, func(_ context.Context, e *taskling.Execution) error {
		ran <- e.Key()
		return nil
	}, nil)
	select {
	case key := <-ran:
		require.Empty(t, key, "a submission of before has no key")
	case <-time.After(15 * time.Second):
		t.Fatal("the submission from before the upgrade did not run")
	}
	b.waitStatus(t, sub, taskling.SubmissionCompleted)
	require.NoError(t, x.Complete(ctx))
}

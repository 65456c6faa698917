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

// TestRatesUpgradeServesTheHoldersWaitersAndSubmissionsOfBefore: 0023 (rates, grant protocol 7)
// on a database of 0022 in use. A keyed holder started before the upgrade keeps its slot and
// completes; a keyed waiter queued before it is granted the slot; a submission made before it runs
// under the rate a host of the new release declares; rated starts then keep their rate.
func TestRatesUpgradeServesTheHoldersWaitersAndSubmissionsOfBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 22))
	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withKeys(2, 1, nil))), app: "app", task: "task"}
	holder := b.start(t, &taskling.StartOptions{Key: "acme"})
	second := b.start(t, &taskling.StartOptions{Key: "globex"})
	waiting := make(chan error, 1)
	go func() {
		e, err := newClient(t, pool, noAutoCleanup(withKeys(2, 1, nil))).StartExecution(ctx, b.app, b.task,
			&taskling.StartOptions{Key: "initech", WaitForSlot: true})
		if err == nil {
			err = e.Complete(ctx)
		}
		waiting <- err
	}()
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM taskling.key_ticket`) == 1 }, 10*time.Second, 10*time.Millisecond)
	sub, err := b.client.Submit(ctx, b.app, b.task, &taskling.SubmitOptions{ReferenceValue: "before", Key: "acme"})
	require.NoError(t, err)
	rated := newClient(t, pool, noAutoCleanup(withRates(2, taskling.Rate{Count: 3, Per: time.Hour}, taskling.Rate{})))
	_, err = rated.StartExecution(ctx, b.app, b.task, nil)
	require.ErrorContains(t, err, "rates need migration 0023", "a rated start waits for the migration")

	require.NoError(t, migrations.Up(ctx, pool))
	require.Equal(t, 7, b.count(t, `SELECT version FROM taskling.protocol`))
	require.NoError(t, holder.Complete(ctx))
	require.NoError(t, <-waiting, "the waiter of before was granted the freed slot")
	require.NoError(t, second.Complete(ctx))

	ran := make(chan string, 1)
	b.work(t, rated, func(_ context.Context, e *taskling.Execution) error {
		ran <- e.Key()
		return nil
	}, nil)
	select {
	case key := <-ran:
		require.Equal(t, "acme", key, "the submission of before, under the rate")
	case <-time.After(15 * time.Second):
		t.Fatal("the submission from before the upgrade did not run")
	}
	b.waitStatus(t, sub, taskling.SubmissionCompleted)
	_, err = rated.StartExecution(ctx, b.app, b.task, nil)
	require.ErrorIs(t, err, taskling.ErrRateLimited, "3 an hour, burst 1: the submission took the only unit of the first 20 minutes")
}

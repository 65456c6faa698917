package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestARateGrantsNothingForOnePerAfterARealFailover: an asynchronous standby promoted may lack the
// rate's last grants, and its clock may differ. On the new timeline, the rate grants nothing until
// one Per has passed since the timeline was first seen; then it grants within the rate again.
func TestARateGrantsNothingForOnePerAfterARealFailover(t *testing.T) {
	ctx := context.Background()
	p, err := pgcluster.NewPair(ctx, &pgcluster.PairOptions{Dir: serverDir(t), Mode: pgcluster.Asynchronous})
	skipWithoutServers(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	pool, err := pgxpool.New(ctx, p.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.Up(ctx, pool))
	settings := fast
	settings.ConcurrencyLimit, settings.Rate = 10, taskling.Rate{Count: 10, Per: 3 * time.Second, Burst: 10}
	client := newClient(t, pool, &taskling.Config{Defaults: settings})
	for range 3 {
		e, err := client.StartExecution(ctx, "app", "task", nil)
		require.NoError(t, err)
		require.NoError(t, e.Complete(ctx))
	}
	require.NoError(t, p.WaitCaughtUp(ctx))
	setReadOnly(t, p.Primary().URL(), true) // the old primary stays up, read-only: the writes move
	_, err = p.Promote(ctx)
	require.NoError(t, err)

	var e *taskling.Execution
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		e, err = client.StartExecution(wctx, "app", "task", &taskling.StartOptions{WaitForSlot: true})
		cancel()
		if err == nil {
			break
		}
	}
	require.NoError(t, err, "a start on the new primary")
	require.NoError(t, e.Complete(ctx))
	var sinceSwitch time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(e.started_at) - max(p.since) FROM taskling.task_execution e, taskling.epoch p
        WHERE p.since > '-infinity' AND e.started_at > p.since`).Scan(&sinceSwitch))
	require.GreaterOrEqual(t, sinceSwitch, 3*time.Second, "the first grant on the new timeline came one Per (3 s) after it was first seen")
	for range 9 {
		e, err := client.StartExecution(ctx, "app", "task", nil)
		require.NoError(t, err, "then the rate grants its burst again")
		require.NoError(t, e.Complete(ctx))
	}
	_, err = client.StartExecution(ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrRateLimited)
}

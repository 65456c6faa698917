package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// checkRateHoldAfterFailover (TestClientFollowsFailoverFromPrimaryLeftReadOnly calls it once the
// standby was promoted): an asynchronous standby promoted may lack a rate's last grants, and its
// clock may differ, so on the new timeline a rate grants nothing until one Per has passed since
// the timeline was first seen; then it grants its burst again.
func checkRateHoldAfterFailover(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	settings := fast
	settings.ConcurrencyLimit, settings.Rate = 10, taskling.Rate{Count: 10, Per: 3 * time.Second, Burst: 10}
	client := newClient(t, pool, &taskling.Config{HostName: "rated", Defaults: settings})
	e, err := client.StartExecution(ctx, "vendor", "sync", &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err, "a start on the new primary")
	require.NoError(t, e.Complete(ctx))
	var sinceSwitch time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT e.started_at - p.since FROM taskling.task_execution e
        JOIN taskling.task_definition d ON d.id = e.task_id AND d.application_name = 'vendor'
        CROSS JOIN LATERAL (SELECT max(since) AS since FROM taskling.epoch WHERE since > '-infinity') p
        WHERE NOT e.blocked`).Scan(&sinceSwitch))
	require.GreaterOrEqual(t, sinceSwitch, 3*time.Second, "the first grant on the new timeline came one Per (3 s) after it was first seen")
	for range 9 {
		e, err := client.StartExecution(ctx, "vendor", "sync", nil)
		require.NoError(t, err, "then the rate grants its burst again")
		require.NoError(t, e.Complete(ctx))
	}
	_, err = client.StartExecution(ctx, "vendor", "sync", nil)
	require.ErrorIs(t, err, taskling.ErrRateLimited)
}

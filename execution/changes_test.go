package execution_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
)

// TestARetiredScheduleRefusesAClaimPlannedBeforeIt: a host that planned an instant on the cursor
// it read before the schedule was retired fails its claim (the compare-and-set requires the
// schedule not retired) and writes nothing; unretired, the same claim succeeds.
func TestARetiredScheduleRefusesAClaimPlannedBeforeIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	row, err := b.store.UpsertSchedule(b.ctx, execution.ScheduleDef{TaskID: b.taskID, Spec: "* * * * * *", TimeZone: "UTC",
		MaxCatchUp: 100, MisfireThreshold: 5 * time.Second, Host: "h"})
	require.NoError(t, err)
	changed, found, err := b.store.RetireSchedule(b.ctx, b.taskID, execution.Operator{Principal: "ops", By: "ops"})
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, found)
	changed, _, err = b.store.RetireSchedule(b.ctx, b.taskID, execution.Operator{Principal: "ops", By: "ops"})
	require.NoError(t, err)
	require.False(t, changed, "retired already")

	claim := func() error {
		req := b.request(1)
		instant := row.Cursor.Truncate(time.Second).Add(time.Second)
		req.ScheduledFor, req.Schedule = &instant, &execution.ScheduleClaim{Expected: row.Cursor}
		_, err := b.store.Acquire(b.ctx, req)
		return err
	}
	err = claim()
	require.True(t, execution.IsScheduleConflict(err), "%v", err)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.task_execution`).Scan(&n))
	require.Zero(t, n, "the claim wrote nothing")

	changed, err = b.store.Unretire(b.ctx, execution.UnretireRequest{TaskID: b.taskID, Schedule: true, Op: execution.Operator{Principal: "ops", By: "ops"}})
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, claim())
	changes, err := b.store.Changes(b.ctx, b.taskID, 0, 10)
	require.NoError(t, err)
	require.Len(t, changes, 2)
	require.Equal(t, execution.FieldScheduleRetired, changes[0].Field)
	require.Equal(t, "no", *changes[0].New)
}

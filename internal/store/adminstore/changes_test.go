package adminstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/store/adminstore"
	"github.com/taskling-go/taskling/internal/store/schedulestore"
)

// TestARetiredScheduleRefusesAClaimPlannedBeforeIt: a host that planned an instant on the cursor
// it read before the schedule was retired fails its claim (the compare-and-set requires the
// schedule not retired) and writes nothing; unretired, the same claim succeeds.
func TestARetiredScheduleRefusesAClaimPlannedBeforeIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	row, err := b.scheds.UpsertSchedule(b.ctx, schedulestore.ScheduleDef{TaskID: b.taskID, Spec: "* * * * * *", TimeZone: "UTC",
		MaxCatchUp: 100, MisfireThreshold: 5 * time.Second, Host: "h"})
	require.NoError(t, err)
	changed, found, err := b.admin.RetireSchedule(b.ctx, b.taskID, execution.Operator{Principal: "ops", By: "ops"})
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, found)
	changed, _, err = b.admin.RetireSchedule(b.ctx, b.taskID, execution.Operator{Principal: "ops", By: "ops"})
	require.NoError(t, err)
	require.False(t, changed, "retired already")

	claim := func() error {
		instant := row.Cursor.Truncate(time.Second).Add(time.Second)
		_, err := b.store.ClaimInstant(b.ctx, execution.ClaimInstantRequest{AcquireRequest: b.request(1), Instant: instant,
			Claim: execution.ScheduleClaim{Expected: row.Cursor}})
		return err
	}
	err = claim()
	require.True(t, execution.IsScheduleConflict(err), "%v", err)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM taskling.task_execution`).Scan(&n))
	require.Zero(t, n, "the claim wrote nothing")

	changed, err = b.admin.Unretire(b.ctx, adminstore.UnretireRequest{TaskID: b.taskID, Schedule: true, Op: execution.Operator{Principal: "ops", By: "ops"}})
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, claim())
	changes, err := b.admin.Changes(b.ctx, b.taskID, 0, 10)
	require.NoError(t, err)
	require.Len(t, changes, 2)
	require.Equal(t, adminstore.FieldScheduleRetired, changes[0].Field)
	require.Equal(t, "no", *changes[0].New)
}

package taskling_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

func TestReadMethodsShowTasksSlotsAndExecutions(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	holder := b.start(t, &taskling.StartOptions{ReferenceValue: "r1", Header: map[string]string{"k": "v"}})
	require.NoError(t, holder.SetProgress(b.ctx, 3, 10))
	require.NoError(t, holder.Checkpoint(b.ctx, "halfway"))
	require.NoError(t, b.client.Run(b.ctx, "other-app", "job", func(ctx context.Context, e *taskling.Execution) error { return nil }, nil))

	page, err := b.client.Tasks(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, page.Tasks, 2)
	require.Equal(t, "app", page.Tasks[0].Application, "ordered by application and task")
	info := page.Tasks[0]
	require.Equal(t, 2, info.Limit)
	require.Equal(t, taskling.LimitSourceDeclared, info.LimitSource)
	require.Equal(t, 2, info.DeclaredLimit)
	require.Equal(t, "test-host", info.DeclaredBy)
	require.Equal(t, 1, info.SlotsUsed)
	require.Equal(t, 2, info.SlotsTotal)
	require.Equal(t, int64(1), info.Fence)
	require.Equal(t, holder.ID(), info.LastExecution.ID)
	require.Equal(t, taskling.StatusInProgress, info.LastExecution.Status)

	page, err = b.client.Tasks(b.ctx, &taskling.TaskFilter{Application: "other-app"})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	require.Equal(t, "job", page.Tasks[0].Task)

	detail, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Len(t, detail.Slots, 2)
	var holders []*taskling.Holder
	for _, s := range detail.Slots {
		if s.Holder != nil {
			require.Equal(t, taskling.SlotHeld, s.Status)
			holders = append(holders, s.Holder)
		} else {
			require.Equal(t, taskling.SlotAvailable, s.Status)
		}
	}
	require.Len(t, holders, 1)
	h := holders[0]
	require.Equal(t, holder.ID(), h.ExecutionID)
	require.True(t, h.Found && h.Alive)
	require.Equal(t, "test-host", h.Host)
	require.Equal(t, int64(3), h.ItemsDone)
	require.Equal(t, int64(10), h.ItemsTotal)

	x, err := b.client.Execution(b.ctx, holder.ID())
	require.NoError(t, err)
	require.Equal(t, "app", x.Application)
	require.Equal(t, "task", x.Task)
	require.Equal(t, "r1", x.ReferenceValue)
	require.JSONEq(t, `{"k":"v"}`, string(x.Header))
	require.Equal(t, taskling.Version, x.LibraryVersion)
	require.False(t, x.LastHeartbeat.IsZero())
	require.Len(t, x.Events, 2)
	require.Equal(t, taskling.EventStart, x.Events[0].Type)
	require.Equal(t, taskling.EventCheckpoint, x.Events[1].Type)
	require.Equal(t, "halfway", x.Events[1].Message)
}

func TestReadMethodsReportMissingTasksAndExecutions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.Task(b.ctx, "no", "such")
	require.ErrorIs(t, err, taskling.ErrNotFound)
	require.EqualError(t, err, "taskling: task no/such: not found")
	_, err = b.client.Executions(b.ctx, "no", "such", nil)
	require.ErrorIs(t, err, taskling.ErrNotFound)
	_, err = b.client.Execution(b.ctx, 987654321)
	require.ErrorIs(t, err, taskling.ErrNotFound)
	_, err = b.client.Execution(b.ctx, 0)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
}

func TestExecutionsPagesNewestFirstAndFiltersByStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(-1))
	var ids []int64
	for i := range 5 {
		e := b.start(t, nil)
		if i%2 == 0 {
			require.NoError(t, e.RecordError(b.ctx, "bad", true))
		}
		require.NoError(t, e.Complete(b.ctx))
		ids = append(ids, e.ID())
	}
	page, err := b.client.Executions(b.ctx, b.app, b.task, &taskling.ExecutionFilter{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[4], ids[3]}, idsOf(page.Executions))
	require.Equal(t, ids[3], page.NextBefore)
	page, err = b.client.Executions(b.ctx, b.app, b.task, &taskling.ExecutionFilter{Limit: 2, Before: page.NextBefore})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2], ids[1]}, idsOf(page.Executions))
	page, err = b.client.Executions(b.ctx, b.app, b.task, &taskling.ExecutionFilter{Limit: 2, Before: page.NextBefore})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0]}, idsOf(page.Executions))
	require.Zero(t, page.NextBefore, "the last page")

	page, err = b.client.Executions(b.ctx, b.app, b.task, &taskling.ExecutionFilter{Status: taskling.StatusFailed})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[4], ids[2], ids[0]}, idsOf(page.Executions))

	for _, f := range []taskling.ExecutionFilter{{Status: "running"}, {Limit: -1}, {Limit: taskling.MaxExecutionsPage + 1}, {Before: -1}} {
		_, err := b.client.Executions(b.ctx, b.app, b.task, &f)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%+v", f)
	}
}

func TestParseStatusNamesEveryStatus(t *testing.T) {
	for _, s := range taskling.Statuses {
		got, err := taskling.ParseStatus(string(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	_, err := taskling.ParseStatus("running")
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.ErrorContains(t, err, "in_progress, completed, failed, blocked or dead")
}

// TestHooksReportGrantsDenialsReclaimsAndLeaseLosses checks each hook against what happened.
func TestHooksReportGrantsDenialsReclaimsAndLeaseLosses(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	var mu sync.Mutex
	seen := map[string]int{}
	count := func(kind string, n int) {
		mu.Lock()
		defer mu.Unlock()
		seen[kind] += n
	}
	b.client.AddHooks(taskling.Hooks{
		AcquireDone: func(app, task string, _ time.Duration) { count("acquire "+app+"/"+task, 1) },
		Granted:     func(app, task string) { count("granted", 1) },
		Denied:      func(app, task string, r taskling.DenyReason) { count("denied "+string(r), 1) },
		Reclaimed:   func(app, task string, n int) { count("reclaimed", n) },
		LeaseLost:   func(app, task string) { count("lease lost", 1) },
	})
	frozen := b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	frozen.StopHeartbeatForTest()
	<-frozen.Context().Done()
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))
	disabled := false
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Enabled: &disabled}))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrTaskDisabled)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, seen["granted"])
	require.Equal(t, 1, seen["denied limit"], "the waiter's denials are not counted: it got its slot")
	require.Equal(t, 1, seen["denied disabled"])
	require.Equal(t, 1, seen["reclaimed"])
	require.Equal(t, 1, seen["lease lost"])
	require.GreaterOrEqual(t, seen["acquire app/task"], 4)
	require.Positive(t, b.client.Stats().Transactions)
}

func idsOf(xs []taskling.ExecutionInfo) []int64 {
	ids := make([]int64, len(xs))
	for i, x := range xs {
		ids[i] = x.ID
	}
	return ids
}

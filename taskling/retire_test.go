package taskling_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

func (b *testBundle) listed(t *testing.T, status taskling.TaskStatusFilter) []string {
	t.Helper()
	page, err := b.client.Tasks(b.ctx, &taskling.TaskFilter{Status: status})
	require.NoError(t, err)
	var names []string
	for _, task := range page.Tasks {
		names = append(names, task.Application+"/"+task.Task)
	}
	return names
}

// TestARetiredTaskRefusesStartsAndLeavesTheLists: retiring refuses every start with
// ErrTaskRetired (nothing written; a waiter on another host learns it at once), lets the running
// execution complete, hides the task from the lists but for the retired filter, keeps its
// history and its enabled override; unretiring restores all of it. The task row itself says
// disabled, which is what binaries older than retirement read.
func TestARetiredTaskRefusesStartsAndLeavesTheLists(t *testing.T) {
	t.Parallel()
	b := setup(t, steady(1))
	ctx := b.ctx
	var retiredDenials atomic.Int64
	b.client.AddHooks(taskling.Hooks{Denied: func(_, _ string, r taskling.DenyReason) {
		if r == taskling.DenyRetired {
			retiredDenials.Add(1)
		}
	}})
	on, two := true, 2
	require.NoError(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{Enabled: &on}))
	running := b.start(t, nil)
	other := newClient(t, b.pool, &taskling.Config{HostName: "other", Defaults: taskling.TaskSettings{ConcurrencyLimit: 1}})
	waited := make(chan error, 1)
	go func() {
		e, err := other.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
		if e != nil {
			_ = e.Complete(ctx)
		}
		waited <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to queue", func() bool {
		info, err := b.client.Task(ctx, b.app, b.task)
		require.NoError(t, err)
		return info.Waiting == 1
	})
	require.Equal(t, []string{"app/task"}, b.listed(t, ""))

	require.NoError(t, b.client.RetireTask(ctx, b.app, b.task, "ops"))
	select {
	case err := <-waited:
		require.ErrorIs(t, err, taskling.ErrTaskRetired)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not learn that the task was retired")
	}
	executions := b.count(t, `SELECT count(*) FROM taskling.task_execution`)
	err := b.denied(t, nil)
	require.ErrorIs(t, err, taskling.ErrTaskRetired)
	require.NotErrorIs(t, err, taskling.ErrTaskDisabled)
	require.ErrorContains(t, err, "app/task (retired by ops at ")
	require.ErrorIs(t, b.denied(t, &taskling.StartOptions{WaitForSlot: true}), taskling.ErrTaskRetired)
	require.Equal(t, executions, b.count(t, `SELECT count(*) FROM taskling.task_execution`), "nothing written")
	require.Equal(t, int64(2), retiredDenials.Load())
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_definition WHERE enabled = false`), "what every binary reads")
	require.NoError(t, running.Complete(ctx), "a running execution completes")

	require.Empty(t, b.listed(t, ""), "hidden from the list")
	require.Empty(t, b.listed(t, taskling.TaskIdle))
	require.Equal(t, []string{"app/task"}, b.listed(t, taskling.TaskRetired))
	info, err := b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, "ops", info.Retired.By)
	require.Equal(t, &on, info.Overrides.Enabled, "the enabled override as it was set")
	history, err := b.client.LastExecutions(ctx, b.app, b.task, 10)
	require.NoError(t, err)
	require.Len(t, history, 1, "its history stays")

	require.NoError(t, b.client.UpdateTaskSettings(ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &two}), "other settings still change")
	require.NoError(t, b.client.RetireTask(ctx, b.app, b.task, "ops again"), "retiring twice changes nothing")
	require.NoError(t, b.client.UnretireTask(ctx, b.app, b.task, "ops"))
	require.NoError(t, b.client.UnretireTask(ctx, b.app, b.task, "ops"))
	info, err = b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Nil(t, info.Retired)
	require.Equal(t, &on, info.Overrides.Enabled, "restored")
	require.Equal(t, []string{"app/task"}, b.listed(t, ""))
	b.start(t, nil)
	b.start(t, nil) // the limit set while retired

	// Clearing a retired task's overrides leaves it retired; unretired, it runs as declared.
	require.NoError(t, b.client.RetireTask(ctx, b.app, b.task, "ops"))
	require.NoError(t, b.client.ClearOverrides(ctx, b.app, b.task))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrTaskRetired)
	require.NoError(t, b.client.UnretireTask(ctx, b.app, b.task, ""))
	info, err = b.client.Task(ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, taskling.SettingsUpdate{}, info.Overrides)
	require.Equal(t, []change{
		{"enabled", "-", "true", "library@test-host"},
		{"retired", "no", "yes", "ops"},
		{"concurrency_limit", "-", "2", "library@test-host"},
		{"retired", "yes", "no", "ops"},
		{"retired", "no", "yes", "ops"},
		{"concurrency_limit", "2", "-", "library@test-host"},
		{"enabled", "true", "-", "library@test-host"},
		{"retired", "yes", "no", "library@test-host"},
	}, b.newChanges(t, 0))
	require.ErrorIs(t, b.client.RetireTask(ctx, b.app, "nope", "ops"), taskling.ErrNotFound)
	require.ErrorIs(t, b.client.RetireSchedule(ctx, b.app, b.task, "ops"), taskling.ErrNotFound, "it has no schedule")
}

// TestARetiredScheduleClaimsNothingUntilUnretired: a per-second schedule stops running when its
// schedule is retired — a host registering it again does not bring it back, while the task
// still starts by hand — and again when the whole task is; unretired, it runs again from now,
// and the instants in between are recorded as retired, not run.
func TestARetiredScheduleClaimsNothingUntilUnretired(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(context.Context, *taskling.Execution) error { runs.Add(1); return nil }
	h := startCronHost(t, pool, "h1", "* * * * * *", fn, nil)
	c := h.client
	var attempts atomic.Int64 // acquisitions, claims included
	c.AddHooks(taskling.Hooks{AcquireDone: func(string, string, time.Duration) { attempts.Add(1) }})
	waitFor(t, 10*time.Second, "a first run", func() bool { return runs.Load() >= 1 })

	quiet := func(retire, unretire func(ctx context.Context, app, task, by string) error, what string) {
		t.Helper()
		require.NoError(t, retire(ctx, "app", "cron", "ops"))
		time.Sleep(500 * time.Millisecond) // a run claimed before may still start
		n, tried := runs.Load(), attempts.Load()
		time.Sleep(2500 * time.Millisecond)
		require.Equal(t, n, runs.Load(), "no instant claimed while the %s is retired", what)
		require.Equal(t, tried, attempts.Load(), "nor tried: the scheduler sleeps")
		require.NoError(t, unretire(ctx, "app", "cron", "ops"))
		waitFor(t, 10*time.Second, "runs again after unretiring the "+what, func() bool { return runs.Load() > n })
	}
	require.NoError(t, c.RetireSchedule(ctx, "app", "cron", "ops"))
	require.NoError(t, c.Schedule(ctx, "app", "cron", "* * * * * *", fn, nil), "registering it again is no error")
	e, err := c.StartExecution(ctx, "app", "cron", nil)
	require.NoError(t, err, "the task itself still starts")
	require.NoError(t, e.Complete(ctx))
	info, err := c.Task(ctx, "app", "cron")
	require.NoError(t, err)
	require.True(t, info.HasSchedule)
	require.Equal(t, "ops", info.ScheduleRetired.By)
	require.Nil(t, info.Retired)
	quiet(func(context.Context, string, string, string) error { return nil }, c.UnretireSchedule, "schedule")
	quiet(c.RetireTask, c.UnretireTask, "task")

	history, err := c.ScheduleHistory(ctx, "app", "cron", 100)
	require.NoError(t, err)
	var retired []taskling.ScheduleEvent
	for _, ev := range history {
		if ev.Kind == taskling.ScheduleEventRetired {
			retired = append(retired, ev)
		}
	}
	require.Len(t, retired, 2, "one record per unretiring: %+v", history)
	for _, ev := range retired {
		require.GreaterOrEqual(t, ev.Instants, int64(2), "%+v", ev)
	}
}

// TestCleanupDeletesARetiredTasksLatestExecution: the latest execution of a task is kept
// whatever its age, unless the task is retired.
func TestCleanupDeletesARetiredTasksLatestExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(steady(1)))
	b.run(t, false, 20*day)
	b.run(t, false, 20*day)
	require.Equal(t, int64(1), b.cleanup(t, b.client).Completed)
	require.Len(t, b.executionIDs(t), 1, "the latest is kept")
	require.NoError(t, b.client.RetireTask(b.ctx, b.app, b.task, "ops"))
	require.Equal(t, int64(1), b.cleanup(t, b.client).Completed)
	require.Empty(t, b.executionIDs(t))
	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Nil(t, info.LastExecution)
}

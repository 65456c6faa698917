package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

func ptr[T any](v T) *T { return &v }

func TestRaisingLimitAddsSlotsAtNextStart(t *testing.T) {
	t.Parallel()
	src := &settingsVar{}
	src.limit.Store(2)
	b := setup(t, &taskling.Config{Settings: src})
	b.start(t, nil)
	b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	src.limit.Store(3)
	b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
}

func TestLoweringLimitNeverEvictsLiveHolder(t *testing.T) {
	t.Parallel()
	src := &settingsVar{}
	src.limit.Store(3)
	b := setup(t, &taskling.Config{Settings: src})
	holders := []*taskling.Execution{b.start(t, nil), b.start(t, nil), b.start(t, nil)}
	src.limit.Store(1)

	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	require.NoError(t, holders[0].Complete(b.ctx))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "2 held > limit 1")
	time.Sleep(threshold + 200*time.Millisecond) // holders keep heartbeating past the threshold
	require.NoError(t, holders[1].Complete(b.ctx), "a retiring holder still returns its slot")
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "1 held = limit 1")
	require.False(t, leaseLost(holders[2]))
	require.NoError(t, holders[2].Complete(b.ctx))
	b.start(t, nil)
}

func TestUnlimitedToLimitedAdoptsRunningExecutions(t *testing.T) {
	t.Parallel()
	src := &settingsVar{}
	src.limit.Store(-1)
	b := setup(t, &taskling.Config{Settings: src})
	var running []*taskling.Execution
	for range 3 {
		running = append(running, b.start(t, nil))
	}
	src.limit.Store(2)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "3 running > 2")
	require.NoError(t, running[0].Complete(b.ctx))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "2 running = 2")
	require.NoError(t, running[1].Complete(b.ctx))
	b.start(t, nil)
	require.NoError(t, running[2].Complete(b.ctx), "an adopted execution returns its slot normally")
}

func TestOperatorOverrideWinsOverDeclaredLimitOnEveryClient(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(5))
	operator := newClient(t, b.pool, withLimit(1))
	require.NoError(t, operator.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: ptr(2)}))
	b.start(t, nil)
	b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "the override (2) is obeyed, not the declared 5")

	require.NoError(t, operator.ClearOverrides(b.ctx, b.app, b.task))
	b.start(t, nil) // back to the declared limit of 5
}

func TestDisabledTaskWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Enabled: ptr(false)}))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrTaskDisabled)
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.task_execution`))

	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Enabled: ptr(true)}))
	b.start(t, nil)

	declaredOff := newClient(t, b.pool, &taskling.Config{Defaults: taskling.TaskSettings{Disabled: true}})
	require.NoError(t, b.client.ClearOverrides(b.ctx, b.app, b.task))
	_, err := declaredOff.StartExecution(b.ctx, b.app, "other", nil)
	require.ErrorIs(t, err, taskling.ErrTaskDisabled)
}

func TestBadSettingsAreErrorsNamingTheField(t *testing.T) {
	t.Parallel()
	pool := setup(t, nil).pool
	for _, tc := range []struct {
		settings taskling.TaskSettings
		field    string
	}{
		{taskling.TaskSettings{ConcurrencyLimit: -2}, "ConcurrencyLimit"},
		{taskling.TaskSettings{KeepAliveInterval: -time.Second}, "KeepAliveInterval"},
		{taskling.TaskSettings{KeepAliveInterval: 10 * time.Second, KeepAliveDeathThreshold: 15 * time.Second}, "KeepAliveDeathThreshold"},
		{taskling.TaskSettings{DeathMode: taskling.DeathModeOverride}, "OverrideThreshold"},
		{taskling.TaskSettings{DeathMode: 7}, "DeathMode"},
		{taskling.TaskSettings{LeaseSafetyMargin: -time.Second}, "LeaseSafetyMargin"},
	} {
		_, err := taskling.NewClient(pool, &taskling.Config{Defaults: tc.settings})
		require.ErrorIs(t, err, taskling.ErrInvalidSettings, tc.field)
		require.Contains(t, err.Error(), tc.field)
	}

	_, err := taskling.NewClient(pool, &taskling.Config{MaxPollInterval: 31 * time.Second})
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.Contains(t, err.Error(), "MaxPollInterval", "a waiter's mark lasts 60 s: polls must come within 30 s")

	b := setup(t, nil)
	for _, tc := range []struct {
		update taskling.SettingsUpdate
		field  string
	}{
		{taskling.SettingsUpdate{ConcurrencyLimit: ptr(0)}, "ConcurrencyLimit"},
		{taskling.SettingsUpdate{KeepAliveInterval: ptr(time.Duration(0))}, "KeepAliveInterval"},
		{taskling.SettingsUpdate{OverrideThreshold: ptr(-time.Second)}, "OverrideThreshold"},
		{taskling.SettingsUpdate{DeathMode: ptr(taskling.DeathMode(9))}, "DeathMode"},
	} {
		err := b.client.UpdateTaskSettings(b.ctx, b.app, b.task, tc.update)
		require.ErrorIs(t, err, taskling.ErrInvalidSettings, tc.field)
		require.Contains(t, err.Error(), tc.field)
	}

	// A source returning a bad value fails the start, naming the field and the task.
	bad := newClient(t, b.pool, &taskling.Config{Settings: taskling.StaticSettings{"app/task": {KeepAliveDeathThreshold: time.Second}}})
	_, err = bad.StartExecution(b.ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.Contains(t, err.Error(), "KeepAliveDeathThreshold")
}

func TestBadNamesAndOptionsAreErrorsNamingTheArgument(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	long := string(make([]byte, 201))
	for _, tc := range []struct {
		app, task string
		opts      *taskling.StartOptions
		want      string
	}{
		{"", "t", nil, "application name"},
		{"a", "", nil, "task name"},
		{"a", "x\ny", nil, "task name"},
		{"a\xff", "t", nil, "application name"},
		{"a", "t" + long, nil, "task name"},
		{"a", "t", &taskling.StartOptions{Idempotent: true}, "ReferenceValue"},
		{"a", "t", &taskling.StartOptions{ReferenceValue: "a\x00b"}, "ReferenceValue"},
		{"a", "t", &taskling.StartOptions{Header: func() {}}, "Header"},
	} {
		_, err := b.client.StartExecution(b.ctx, tc.app, tc.task, tc.opts)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument)
		require.Contains(t, err.Error(), tc.want)
	}
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.task_definition`), "nothing written for bad input")
	var _ context.Context
}

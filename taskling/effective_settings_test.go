package taskling_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// Issue 22 item 7: overrides were checked field by field only, so an operator could store
// settings that made every start fail (a 300 ms threshold over a declared 5 s interval; Override
// mode with no threshold), and durations had no upper bound (an interval of 1 000 000 h).

// settingsError returns err's *SettingsError, failing the test if it has none.
func settingsError(t *testing.T, err error) *taskling.SettingsError {
	t.Helper()
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	var se *taskling.SettingsError
	require.True(t, errors.As(err, &se), "%v is not a *SettingsError", err)
	return se
}

// Before the fix every update below was accepted (nil error), and the starts after it failed.
func TestOverridesThatNoStartWouldAcceptAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	host := newClient(t, b.pool, &taskling.Config{HostName: "host-a"}) // declares the defaults: 5 s / 20 s
	e := b.start(t, nil)
	require.NoError(t, e.Complete(b.ctx))
	e, err := host.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))
	// The operator's client declares a 100 ms interval itself: what counts is the host's.
	operator := newClient(t, b.pool, &taskling.Config{HostName: "ops", Defaults: fast})
	changes := func() int { return b.count(t, `SELECT count(*) FROM taskling.operator_change`) }

	err = operator.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeepAliveDeathThreshold: ptr(300 * time.Millisecond)})
	se := settingsError(t, err)
	require.Equal(t, "KeepAliveDeathThreshold", se.Field)
	require.ErrorContains(t, err, "KeepAliveDeathThreshold (300ms, operator override) must be at least twice KeepAliveInterval (5s, declared by host-a)")

	err = operator.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{DeathMode: ptr(taskling.DeathModeOverride)})
	require.Equal(t, "DeathMode", settingsError(t, err).Field)
	require.ErrorContains(t, err, "OverrideThreshold (declared by host-a) is 0s; DeathModeOverride (operator override) needs one above zero")

	err = operator.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeepAliveInterval: ptr(15 * time.Second)})
	require.Equal(t, "KeepAliveInterval", settingsError(t, err).Field, "the override made the declared threshold too short")

	for _, u := range []taskling.SettingsUpdate{
		{KeepAliveInterval: ptr(1_000_000 * time.Hour)},
		{KeepAliveInterval: ptr(61 * time.Minute), KeepAliveDeathThreshold: ptr(3 * time.Hour)},
		{KeepAliveDeathThreshold: ptr(25 * time.Hour)},
		{DeathMode: ptr(taskling.DeathModeOverride), OverrideThreshold: ptr(25 * time.Hour)},
	} {
		err := operator.UpdateTaskSettings(b.ctx, b.app, b.task, u)
		require.ErrorIs(t, err, taskling.ErrInvalidSettings, "%+v", u)
		require.ErrorContains(t, err, "want at most")
	}
	require.Zero(t, changes(), "a refused update writes nothing")
	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, taskling.SettingsUpdate{}, info.Overrides)

	// What fits the declaration is accepted, and the starts go on.
	require.NoError(t, operator.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{DeathMode: ptr(taskling.DeathModeOverride),
		OverrideThreshold: ptr(30 * time.Second)}))
	require.NoError(t, operator.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeepAliveDeathThreshold: ptr(24 * time.Hour)}))
	e, err = host.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))

	// Before any host declared, the update is checked against the settings of the client making
	// it (the CLI's: the library defaults).
	err = b.client.UpdateTaskSettings(b.ctx, b.app, "new", taskling.SettingsUpdate{KeepAliveDeathThreshold: ptr(300 * time.Millisecond)})
	require.Equal(t, "KeepAliveDeathThreshold", settingsError(t, err).Field)
	require.ErrorContains(t, err, "KeepAliveInterval (5s, this client's settings, as no host declared any yet)")
	require.NoError(t, operator.UpdateTaskSettings(b.ctx, b.app, "new", taskling.SettingsUpdate{KeepAliveDeathThreshold: ptr(300 * time.Millisecond)}),
		"over this client's 100 ms interval")
}

// Before the fix the bounds were minimums only: an interval of an hour and a half, or a
// threshold of two days, was accepted in every layer.
func TestEveryLayerBoundsTheDurationsFromAbove(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, s := range []taskling.TaskSettings{
		{KeepAliveInterval: 90 * time.Minute, KeepAliveDeathThreshold: 4 * time.Hour},
		{KeepAliveDeathThreshold: 48 * time.Hour},
		{DeathMode: taskling.DeathModeOverride, OverrideThreshold: 48 * time.Hour},
	} {
		_, err := taskling.NewClient(b.pool, &taskling.Config{Defaults: s})
		require.ErrorIs(t, err, taskling.ErrInvalidSettings, "Config.Defaults %+v", s)
		require.ErrorContains(t, err, "want at most")
		require.ErrorIs(t, s.Validate(), taskling.ErrInvalidSettings, "Validate %+v", s)
		bad := newClient(t, b.pool, &taskling.Config{Settings: taskling.StaticSettings{"app/task": s}})
		_, err = bad.StartExecution(b.ctx, b.app, b.task, nil)
		require.ErrorIs(t, err, taskling.ErrInvalidSettings, "a source's %+v", s)
		require.ErrorContains(t, err, "want at most")
	}
	for _, s := range []taskling.TaskSettings{
		{KeepAliveInterval: time.Hour, KeepAliveDeathThreshold: 24 * time.Hour},
		{DeathMode: taskling.DeathModeOverride, OverrideThreshold: 24 * time.Hour},
	} {
		require.NoError(t, s.Validate(), "%+v: the bounds themselves are valid", s)
	}
}

// Before the fix the start's error named neither source ("KeepAliveDeathThreshold (with
// operator overrides) (300ms) must be at least twice KeepAliveInterval (5s)"), and nothing showed
// that every start of the task failed.
func TestAStartWhoseDeclarationTheOverridesDoNotFitFailsNamingBoth(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	quick := newClient(t, b.pool, &taskling.Config{HostName: "host-quick", Defaults: fast}) // 100 ms / 1 s
	e, err := quick.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeepAliveDeathThreshold: ptr(300 * time.Millisecond)}))
	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.NoError(t, info.SettingsError)

	// Another host declares the default 5 s interval after the override was set.
	slow := newClient(t, b.pool, &taskling.Config{HostName: "host-slow"})
	_, err = slow.StartExecution(b.ctx, b.app, b.task, nil)
	require.Equal(t, "KeepAliveDeathThreshold", settingsError(t, err).Field)
	require.ErrorContains(t, err, "KeepAliveDeathThreshold (300ms, operator override) must be at least twice KeepAliveInterval (5s, declared by host-slow)")

	info, err = b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Error(t, info.SettingsError, "the task is flagged")
	require.ErrorContains(t, info.SettingsError, "declared by host-slow")
	page, err := b.client.Tasks(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	require.Error(t, page.Tasks[0].SettingsError, "in the list too")

	// The override fixed, the flag goes and the slow host starts.
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeepAliveDeathThreshold: ptr(10 * time.Second)}))
	info, err = b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.NoError(t, info.SettingsError)
	e, err = slow.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))
}

// Issue 22 item 8: where a task's enabled state comes from. Before the fix the library reported
// only the override (nil: "declared"), whatever the hosts declared.
func TestEnabledSaysWhereItComesFrom(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	enabled := func(task string) (bool, taskling.LimitSource) {
		t.Helper()
		info, err := b.client.Task(b.ctx, b.app, task)
		require.NoError(t, err)
		return info.Enabled, info.EnabledSource
	}
	off := newClient(t, b.pool, &taskling.Config{HostName: "host-off", Defaults: taskling.TaskSettings{Disabled: true}})
	_, err := off.StartExecution(b.ctx, b.app, "off", nil)
	require.ErrorIs(t, err, taskling.ErrTaskDisabled)
	on, source := enabled("off")
	require.False(t, on)
	require.Equal(t, taskling.LimitSourceDeclared, source)

	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, "off", taskling.SettingsUpdate{Enabled: ptr(true)}))
	on, source = enabled("off")
	require.True(t, on)
	require.Equal(t, taskling.LimitSourceOverride, source)

	b.start(t, nil)
	on, source = enabled(b.task)
	require.True(t, on)
	require.Equal(t, taskling.LimitSourceDeclared, source)

	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, "fresh", taskling.SettingsUpdate{ConcurrencyLimit: ptr(2)}))
	on, source = enabled("fresh")
	require.True(t, on, "nothing declared: the default")
	require.Equal(t, taskling.LimitSourceNone, source)

	require.NoError(t, b.client.RetireTask(b.ctx, b.app, "off", "ops"))
	on, source = enabled("off")
	require.False(t, on, "retired")
	require.Equal(t, taskling.LimitSourceOverride, source)
}

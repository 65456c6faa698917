package taskling_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestConcurrencyLimitIsCappedAt10000 is issue 15 item 4: a limit of two billion made every
// host's next acquire build two billion tokens under the row lock.
func TestConcurrencyLimitIsCappedAt10000(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := taskling.NewClient(b.pool, &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 2_000_000_000}})
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.ErrorContains(t, err, "ConcurrencyLimit")
	require.ErrorContains(t, err, "10000")

	err = b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: ptr(taskling.MaxConcurrencyLimit + 1)})
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.ErrorContains(t, err, "ConcurrencyLimit")
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.task_definition`), "a refused override writes nothing")

	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: ptr(taskling.MaxConcurrencyLimit)}))
	e := b.start(t, nil)
	require.NoError(t, e.Complete(b.ctx))
	// The database refuses it too, whoever writes it.
	_, err = b.pool.Exec(b.ctx, `UPDATE taskling.task_definition SET concurrency_limit = 2000000000`)
	require.ErrorContains(t, err, "task_definition_concurrency_limit_check")
}

// TestDurationMinimumsAndSafetyMarginAreEnforced is issue 15 item 5: a 1 ms interval made a
// heartbeat hot loop, and a margin above threshold − interval made every execution cancel itself
// before its first heartbeat.
func TestDurationMinimumsAndSafetyMarginAreEnforced(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		s     taskling.TaskSettings
		field string
	}{
		{taskling.TaskSettings{KeepAliveInterval: time.Millisecond}, "KeepAliveInterval"},
		{taskling.TaskSettings{KeepAliveInterval: 50 * time.Millisecond, KeepAliveDeathThreshold: 200 * time.Millisecond}, "KeepAliveDeathThreshold"},
		{taskling.TaskSettings{DeathMode: taskling.DeathModeOverride, OverrideThreshold: 100 * time.Millisecond}, "OverrideThreshold"},
		{taskling.TaskSettings{KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 3 * time.Second, LeaseSafetyMargin: 2 * time.Second}, "LeaseSafetyMargin"},
		{taskling.TaskSettings{DeathMode: taskling.DeathModeOverride, OverrideThreshold: time.Second, LeaseSafetyMargin: time.Second}, "LeaseSafetyMargin"},
	} {
		_, err := taskling.NewClient(b.pool, &taskling.Config{Defaults: tc.s})
		require.ErrorIs(t, err, taskling.ErrInvalidSettings, "%+v", tc.s)
		require.ErrorContains(t, err, tc.field)
	}
	for _, u := range []taskling.SettingsUpdate{
		{KeepAliveInterval: ptr(10 * time.Millisecond)},
		{KeepAliveDeathThreshold: ptr(100 * time.Millisecond)},
		{OverrideThreshold: ptr(249 * time.Millisecond)},
	} {
		require.ErrorIs(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, u), taskling.ErrInvalidSettings)
	}
	// The settings the tests use stay valid: 100 ms / 1 s, and a 300 ms override threshold.
	for _, s := range []taskling.TaskSettings{fast, {DeathMode: taskling.DeathModeOverride, OverrideThreshold: 300 * time.Millisecond},
		{KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 3 * time.Second, LeaseSafetyMargin: 1999 * time.Millisecond}} {
		_, err := taskling.NewClient(b.pool, &taskling.Config{Defaults: s})
		require.NoError(t, err, "%+v", s)
	}

	// An operator override that shortens the threshold below a declared margin does not make the
	// execution cancel itself at once: the default 25% applies instead.
	declared := taskling.TaskSettings{ConcurrencyLimit: 1, KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: 20 * time.Second,
		LeaseSafetyMargin: 10 * time.Second}
	c := newClient(t, b.pool, &taskling.Config{Defaults: declared})
	require.NoError(t, c.UpdateTaskSettings(b.ctx, "app", "short", taskling.SettingsUpdate{KeepAliveDeathThreshold: ptr(time.Second)}))
	e, err := c.StartExecution(b.ctx, "app", "short", nil)
	require.NoError(t, err)
	defer e.Complete(b.ctx)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, e.Context().Err(), "alive on heartbeats with a 750 ms lease")
}

// TestHeaderSizeAndProgressAreBounded is issue 15 item 6: headers were unbounded and done could
// exceed total.
func TestHeaderSizeAndProgressAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(-1))
	_, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{Header: strings.Repeat("x", taskling.MaxHeaderLength)})
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.ErrorContains(t, err, "StartOptions.Header")
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.task_execution`))
	b.start(t, &taskling.StartOptions{Header: strings.Repeat("x", taskling.MaxHeaderLength-2)}) // the quotes make it 64 KiB

	e := b.start(t, nil)
	err = e.SetProgress(b.ctx, 11, 10)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.ErrorContains(t, err, "done (11) exceeds total (10)")
	require.ErrorContains(t, e.SetProgress(b.ctx, -1, 10), "done is -1")
	require.ErrorContains(t, e.SetProgress(b.ctx, 1, -10), "total is -10")
	require.NoError(t, e.SetProgress(b.ctx, 10, 10))
	require.NoError(t, e.SetProgress(b.ctx, 12, 0), "an unknown total bounds nothing")
}

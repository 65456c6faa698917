package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// hostClient is another host of the fixture's tasks, declaring s.
func hostClient(t *testing.T, url, name string, s taskling.TaskSettings) *taskling.Client {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := taskling.NewClient(pool, &taskling.Config{HostName: name, Defaults: s})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// Issue 22 item 7: before the fix `tasks set --keep-alive-threshold 300ms` over a declared 5 s
// interval exited 0 (and every start failed after it), and `tasks show` said nothing of it.
func TestTasksSetRefusesOverridesNoStartWouldAcceptAndShowFlagsThem(t *testing.T) {
	t.Parallel()
	f := setup(t) // worker-1 declares the default 5 s interval
	for _, tc := range []struct {
		threshold, stderr string
	}{
		{"300ms", "KeepAliveDeathThreshold (300ms, operator override) must be at least twice KeepAliveInterval (5s, declared by worker-1)"},
		{"25h", "want at least 250ms and at most 24h0m0s"},
	} {
		code, out, errOut := cli(t, f.url, "tasks", "set", "billing/export", "--keep-alive-threshold", tc.threshold)
		require.Equal(t, exitUsage, code, "%s: %s", tc.threshold, errOut)
		require.Contains(t, errOut, tc.stderr)
		require.Empty(t, out)
	}
	require.Contains(t, ok(t, f.url, "tasks", "show", "billing/export"), "Limit:     2 (declared)\n", "nothing was stored")
	require.NotContains(t, ok(t, f.url, "tasks", "show", "billing/export"), "Settings:")

	// Hosts with a 100 ms interval: a 300 ms threshold fits. Then one declares 5 s.
	quick := hostClient(t, f.url, "worker-2", taskling.TaskSettings{KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second})
	ctx := context.Background()
	e, err := quick.StartExecution(ctx, "billing", "report", nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	ok(t, f.url, "tasks", "set", "billing/report", "--keep-alive-threshold", "300ms")
	require.NotContains(t, ok(t, f.url, "tasks", "show", "billing/report"), "Settings:")
	_, err = f.client.StartExecution(ctx, "billing", "report", nil)
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.Contains(t, ok(t, f.url, "tasks", "show", "billing/report"),
		"Settings:  INVALID, every start fails: invalid settings: KeepAliveDeathThreshold (300ms, operator override) must be at least twice KeepAliveInterval (5s, declared by worker-1)\n")
}

// Issue 22 item 8: before the fix the ENABLED column said "declared" for every task without an
// enabled override, enabled or not, and "Enabled:   declared" in tasks show.
func TestTasksListEnabledColumnSaysYesOrNoAndWhereFrom(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	off := hostClient(t, f.url, "worker-off", taskling.TaskSettings{Disabled: true})
	_, err := off.StartExecution(ctx, "billing", "paused", nil)
	require.ErrorIs(t, err, taskling.ErrTaskDisabled)
	ok(t, f.url, "tasks", "set", "billing/import", "--disable")
	ok(t, f.url, "tasks", "set", "billing/fresh", "--limit", "2")

	out := ok(t, f.url, "tasks", "list")
	for task, want := range map[string]string{
		"billing/export": "yes (declared)",
		"billing/paused": "no (declared)",
		"billing/import": "no (override)",
		"billing/fresh":  "yes (default)",
	} {
		require.Regexp(t, `(?m)^`+regexp.QuoteMeta(task)+`\s.*\s`+regexp.QuoteMeta(want)+`\s`, out, task)
		require.Contains(t, ok(t, f.url, "tasks", "show", task), "Enabled:   "+want+"\n", "tasks show agrees on %s", task)
	}
	ok(t, f.url, "tasks", "set", "billing/paused", "--enable")
	require.Contains(t, ok(t, f.url, "tasks", "show", "billing/paused"), "Enabled:   yes (override)\n")
	ok(t, f.url, "tasks", "retire", "billing/paused")
	require.Regexp(t, `(?m)^billing/paused\s.*\sno \(retired\)\s`, ok(t, f.url, "tasks", "list", "--status", "retired"))
}

package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/httpapi"
)

// TestTasksSetAndKeysSetOverrideRates: 'tasks set --rate --key-rate' and 'tasks keys set --rate'
// (with or without --limit) store the overrides ("none" too), 'tasks show' prints the rates with
// their sources and when the next start is allowed, 'tasks keys show' each key's rate and next
// start, 'tasks clear' removes them; bad rates are usage errors naming the flag.
func TestTasksSetAndKeysSetOverrideRates(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	out := ok(t, url, "tasks", "set", "billing/export", "--rate", "30/1m", "--key-rate", "10/1m,burst=2", "--by", "OPS-7")
	require.Contains(t, out, "Rate:      30/1m (override); next start allowed now\n")
	require.Contains(t, out, "Key rate:  10/1m,burst=2 (override)\n")
	require.Contains(t, out, "rate", "the change is listed")

	out = ok(t, url, "tasks", "keys", "set", "billing/export", "acme", "--rate", "5/1m")
	require.Regexp(t, `(?m)^"acme"\s+0\s+0\s+0\s+0\s+none\s+none\s+5/1m\s+override\s+now\s*$`, out)
	out = ok(t, url, "tasks", "keys", "set", "billing/export", "acme", "--limit", "2", "--rate", "none")
	require.Regexp(t, `(?m)^"acme"\s+0\s+0\s+0\s+0\s+2\s+override\s+none\s+override\s+now\s*$`, out)

	ctx := context.Background()
	_, err := pool.Exec(ctx, `
UPDATE taskling.task_rate SET tat_us = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 90000000, rate = '1/60000000/1'`)
	require.NoError(t, err)
	out = ok(t, url, "tasks", "show", "billing/export")
	// 90 s ahead when stored, less the time the command took to start (seconds, on a loaded machine).
	require.Regexp(t, regexp.MustCompile(`Rate:      1/1m \(override\); next start allowed in 1m(2\d|30)\.\d+s\n`), out)
	var d httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(ok(t, url, "tasks", "show", "billing/export", "-o", "json")), &d))
	require.InDelta(t, 85, d.NextAllowedSeconds, 5)
	require.Contains(t, out, "key_rate[acme]")

	ok(t, url, "tasks", "set", "billing/export", "--rate", "none")
	require.Contains(t, ok(t, url, "tasks", "show", "billing/export"), "Rate:      none (override); next start allowed now\n")
	require.NotContains(t, ok(t, url, "tasks", "clear", "billing/export"), "Rate:", "no rate, declared or overridden")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tasks", "set", "billing/export", "--rate", "fast"}, "--rate: "},
		{[]string{"tasks", "set", "billing/export", "--key-rate", "0/1m"}, "--key-rate: "},
		{[]string{"tasks", "set", "billing/export", "--rate", ""}, "--rate is empty"},
		{[]string{"tasks", "keys", "set", "billing/export", "acme", "--rate", "1/1ns"}, "--rate: "},
		{[]string{"tasks", "keys", "set", "billing/export", "acme"}, "needs --limit or --rate"},
	} {
		code, _, errOut := cli(t, url, c.args...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
}

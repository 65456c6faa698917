package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// TestTasksKeysSetShowsAndRecordsTheOverride: 'tasks keys set billing/export acme --limit 5' stores
// the override (the start then obeys it), shows the keys, and 'tasks keys clear' removes it; bad
// arguments are usage errors.
func TestTasksKeysSetShowsAndRecordsTheOverride(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	out := ok(t, f.url, "tasks", "keys", "set", "billing/export", "acme", "--limit", "5", "--by", "OPS-7")
	require.Contains(t, out, `"acme"`)
	require.Contains(t, out, "override")
	e, err := f.client.StartExecution(ctx, "billing", "export", &taskling.StartOptions{Key: "acme"})
	require.ErrorIs(t, err, taskling.ErrLimitReached, "the task's own limit of 2 still holds")
	require.Nil(t, e)

	var keys struct {
		Keys []httpapi.Key `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "tasks", "keys", "show", "billing/export", "-o", "json")), &keys))
	require.Len(t, keys.Keys, 2, "acme, named, and the task's own holders under key \"\"")
	require.Contains(t, ok(t, f.url, "tasks", "show", "billing/export"), "key_limit[acme]")
	require.Contains(t, ok(t, f.url, "tasks", "set", "billing/export", "--key-limit", "1"), "Key limit: 1 (override)")
	ok(t, f.url, "tasks", "keys", "clear", "billing/export", "acme")
	require.NotContains(t, ok(t, f.url, "tasks", "keys", "show", "billing/export"), "acme")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tasks", "keys", "set", "billing/export", "acme"}, "needs --limit"},
		{[]string{"tasks", "keys", "set", "billing/export", "acme", "--limit", "0"}, "--limit is 0"},
		{[]string{"tasks", "keys", "set", "billing/export", "--limit", "2"}, "takes APP/TASK and KEY"},
		{[]string{"tasks", "set", "billing/export", "--key-limit", "-1"}, "--key-limit is -1"},
	} {
		code, _, errOut := cli(t, f.url, c.args...)
		require.Equal(t, exitUsage, code, "%v", c.args)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// TestTasksKeysReachTheEmptyKeyAndDotKeys is issue 40 item 8: `tasks keys show` said "No keys in
// use" for a task whose empty key was overridden (stored and enforced); "." is a key like any
// other.
func TestTasksKeysReachTheEmptyKeyAndDotKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	out := ok(t, f.url, "tasks", "keys", "set", "billing/solo", "", "--limit", "2")
	require.Contains(t, out, `""`, out)
	require.NotContains(t, out, "No keys", out)
	ok(t, f.url, "tasks", "keys", "set", "billing/solo", ".", "--limit", "3")
	var keys struct {
		Keys []httpapi.Key `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "tasks", "keys", "show", "billing/solo", "-o", "json")), &keys))
	limits := map[string]int{}
	for _, k := range keys.Keys {
		limits[k.Key] = *k.Limit
	}
	require.Equal(t, map[string]int{"": 2, ".": 3}, limits)
	ok(t, f.url, "tasks", "keys", "clear", "billing/solo", ".")
	require.Contains(t, ok(t, f.url, "tasks", "keys", "show", "billing/solo"), `""`)
}

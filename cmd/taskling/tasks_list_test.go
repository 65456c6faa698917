package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var cursorHint = regexp.MustCompile(`(?m)^1 of 2 tasks shown; the next ones: --cursor (\S+)$`)

// TestTasksListFiltersSortsAndPages: tasks list takes the API's filters, prints the cursor of
// the next page, and --cursor lists it.
func TestTasksListFiltersSortsAndPages(t *testing.T) {
	t.Parallel()
	f := setup(t)
	out := ok(t, f.url, "tasks", "list", "--app", "billing", "--limit", "1")
	require.Contains(t, out, "billing/export")
	require.NotContains(t, out, "billing/import")
	m := cursorHint.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	out = ok(t, f.url, "tasks", "list", "--app", "billing", "--limit", "1", "--cursor", m[1])
	require.Contains(t, out, "billing/import")
	require.NotContains(t, out, "billing/export")
	require.NotContains(t, out, "--cursor", "the last page")

	out = ok(t, f.url, "tasks", "list", "--q", "IMP")
	require.Contains(t, out, "billing/import")
	require.NotContains(t, out, "billing/export")
	out = ok(t, f.url, "tasks", "list", "--status", "at_limit", "--sort", "busy")
	require.Contains(t, out, "billing/export")
	require.NotContains(t, out, "billing/import")

	var list struct {
		Tasks      []json.RawMessage `json:"tasks"`
		NextCursor *string           `json:"next_cursor"`
		Total      int               `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "tasks", "list", "-o", "json", "--limit", "1")), &list))
	require.Len(t, list.Tasks, 1)
	require.Equal(t, 2, list.Total)
	require.NotNil(t, list.NextCursor)

	for _, c := range []struct{ args, want string }{
		{"--status bogus", "--status"},
		{"--sort oldest", "--sort"},
		{"--limit 0", "--limit"},
		{"--limit 501", "--limit"},
		{"--cursor nope", "--cursor"},
	} {
		code, _, errOut := cli(t, f.url, append([]string{"tasks", "list"}, strings.Fields(c.args)...)...)
		require.Equal(t, exitUsage, code, c.args)
		require.Contains(t, errOut, c.want, c.args)
	}
}

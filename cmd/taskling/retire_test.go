package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// TestRetireUnretireAndTheChangesTrail: `tasks retire` refuses the task's starts and takes it out
// of `tasks list` (--status retired lists it); `tasks show` prints the last changes with who
// (--by, else $USER@host); `tasks unretire` brings it back; `tasks changes` pages the trail.
func TestRetireUnretireAndTheChangesTrail(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	ok(t, f.url, "tasks", "set", "billing/export", "--limit", "3", "--by", "alice")
	golden(t, "tasks_retire", ok(t, f.url, "tasks", "retire", "billing/export", "--by", "ops"))

	_, err := f.client.StartExecution(ctx, "billing", "export", nil)
	require.ErrorIs(t, err, taskling.ErrTaskRetired)
	require.NotContains(t, ok(t, f.url, "tasks", "list"), "billing/export")
	require.Contains(t, ok(t, f.url, "tasks", "list", "--status", "retired"), "billing/export")

	out := ok(t, f.url, "tasks", "unretire", "billing/export")
	require.NotContains(t, out, "Retired:")
	require.Contains(t, out, "cli-host  retired            yes → no", "who defaults to the host (no $USER here)")
	require.Contains(t, ok(t, f.url, "tasks", "list"), "billing/export")
	e, err := f.client.StartExecution(ctx, "billing", "export", nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))

	var page httpapi.ChangePage
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "tasks", "changes", "billing/export", "--limit", "2", "-o", "json")), &page))
	require.Len(t, page.Changes, 2)
	require.Equal(t, "retired", page.Changes[1].Field)
	require.Equal(t, "ops", page.Changes[1].By)
	require.NotNil(t, page.NextBefore)
	older := ok(t, f.url, "tasks", "changes", "billing/export", "--before", itoa(*page.NextBefore))
	require.Contains(t, older, "alice  concurrency_limit  inherited → 3")

	code, _, errOut := cli(t, f.url, "tasks", "retire", "billing/export", "--schedule-only")
	require.Equal(t, exitNotFound, code, errOut)
	require.Contains(t, errOut, "schedule of task billing/export: not found")
	code, _, errOut = cli(t, f.url, "tasks", "retire", "billing/nope")
	require.Equal(t, exitNotFound, code, errOut)
	code, _, errOut = cli(t, f.url, "tasks", "retire", "billing/export", "--by", "a\tb")
	require.Equal(t, exitUsage, code, errOut)
	require.Len(t, mustChanges(t, f), 3, "refused commands record nothing")
}

func mustChanges(t *testing.T, f *fixture) []taskling.Change {
	t.Helper()
	page, err := f.client.TaskChanges(context.Background(), "billing", "export", &taskling.ChangeFilter{Limit: 100})
	require.NoError(t, err)
	return page.Changes
}

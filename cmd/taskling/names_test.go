package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// legacyTasks makes tasks as an older release could: names that new tasks may no longer have,
// each with one completed execution.
func legacyTasks(t *testing.T, f *fixture, names ...[2]string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, f.url)
	require.NoError(t, err)
	defer pool.Close()
	for _, n := range names {
		_, err := pool.Exec(ctx, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ($1, $2)`, n[0], n[1])
		require.NoError(t, err)
		require.NoError(t, f.client.Run(ctx, n[0], n[1], func(context.Context, *taskling.Execution) error { return nil }, nil))
	}
}

// TestTasksWithASlashAreReachedWithAppAndTask is issue 23 item 5: "probe"/"a/b" and "probe/a"/"b"
// both print as probe/a/b, and APP/TASK (split at its last slash) reached only the second. --app
// and --task reach either; a new name with a slash is refused.
func TestTasksWithASlashAreReachedWithAppAndTask(t *testing.T) {
	t.Parallel()
	f := setup(t)
	legacyTasks(t, f, [2]string{"probe", "a/b"}, [2]string{"probe/a", "b"})

	out := ok(t, f.url, "tasks", "set", "--app", "probe", "--task", "a/b", "--limit", "5")
	require.Contains(t, out, "Limit:     5 (override)")
	var d httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "-o", "json", "tasks", "show", "--app", "probe", "--task", "a/b")), &d))
	require.Equal(t, [3]any{"probe", "a/b", 5}, [3]any{d.Application, d.Task.Task, d.Limit})
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "-o", "json", "tasks", "show", "probe/a/b")), &d))
	require.Equal(t, [3]any{"probe/a", "b", 1}, [3]any{d.Application, d.Task.Task, d.Limit}, "APP/TASK splits at the last slash")
	for _, args := range [][]string{
		{"executions", "list"}, {"tasks", "changes"}, {"submissions", "list"}, {"blocks", "list"},
		{"tasks", "retire"}, {"tasks", "unretire"}, {"tasks", "clear"}, {"cleanup", "--dry-run"},
	} {
		ok(t, f.url, append(args, "--app", "probe", "--task", "a/b")...)
	}

	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"submit", "probe/x/y"}, `application name "probe/x" contains '/'`},
		{[]string{"tasks", "set", "--app", "probe", "--task", "x/y", "--limit", "2"}, `task name "x/y" contains '/'`},
		{[]string{"tasks", "show", "--app", "probe"}, "--app and --task go together"},
		{[]string{"tasks", "show", "probe/a/b", "--app", "probe", "--task", "a/b"}, "not both"},
		{[]string{"tasks", "show"}, "takes one argument, APP/TASK"},
		{[]string{"blocks", "list", "--execution", "1", "--app", "probe", "--task", "a/b"}, "not both"},
	} {
		code, out, errOut := cli(t, f.url, tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.stderr, "%v", tc.args)
		require.Empty(t, out)
	}
}

// TestStoredNamesAreEscapedWhereverTheCLIPrintsThem is issue 23 item 5: `tasks show` printed the
// task name raw, so a right-to-left override in it reversed the rest of the line; so did the
// error naming a task, and the JSON output.
func TestStoredNamesAreEscapedWhereverTheCLIPrintsThem(t *testing.T) {
	t.Parallel()
	f := setup(t)
	name := "report\u202eslx.exe"
	legacyTasks(t, f, [2]string{"probe", name})
	outputs := map[string]string{
		"show":       ok(t, f.url, "tasks", "show", "probe/"+name),
		"list":       ok(t, f.url, "tasks", "list"),
		"executions": ok(t, f.url, "executions", "list", "probe/"+name),
		"json":       ok(t, f.url, "-o", "json", "tasks", "show", "probe/"+name),
	}
	_, _, outputs["error"] = cli(t, f.url, "tasks", "show", "probe/nope\u202e")
	for what, out := range outputs {
		require.NotContains(t, out, "\u202e", what)
	}
	require.Contains(t, outputs["show"], `Task:      probe/report\u202eslx.exe`)
	require.Contains(t, outputs["error"], `probe/nope\u202e`)
	var d httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(outputs["json"]), &d))
	require.Equal(t, name, d.Task.Task, "the JSON escape decodes to the name")
}

// TestTerminalWriterEscapesAcrossWrites: a rune split across writes is escaped whole.
func TestTerminalWriterEscapesAcrossWrites(t *testing.T) {
	var b strings.Builder
	w := &terminalWriter{w: &b}
	s := "a\u202eb\tc\n\x1b[2Jd\U000E0041e\u00e9\ufffd"
	for i := range len(s) { // one byte at a time
		_, err := w.Write([]byte{s[i]})
		require.NoError(t, err)
	}
	_, err := w.Write([]byte{0xe2, 0x80}) // a rune cut short, then the end
	require.NoError(t, err)
	w.flush()
	require.Equal(t, `a\u202eb`+"\tc\n"+`\u001b[2Jd\udb40\udc41eé`+"\ufffd"+`\ufffd\ufffd`, b.String())
}

// TestDotSegmentsAreRefusedAsNewNames is issue 40 item 8: `tasks set dotapp/..` made a task whose
// dashboard link led to another page. A new "." or ".." is refused; a task made before keeps its
// name and is reached as before.
func TestDotSegmentsAreRefusedAsNewNames(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, args := range [][]string{
		{"tasks", "set", "dotapp/..", "--limit", "2"},
		{"tasks", "set", "--app", ".", "--task", "x", "--limit", "2"},
		{"submit", "dotapp/."},
	} {
		code, out, errOut := cli(t, f.url, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, `name is "`, "%v", args)
		require.Empty(t, out)
	}
	legacyTasks(t, f, [2]string{"olddot", ".."})
	require.Contains(t, ok(t, f.url, "tasks", "set", "olddot/..", "--limit", "4"), "Limit:     4 (override)")
	var d httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "-o", "json", "tasks", "show", "olddot/..")), &d))
	require.Equal(t, [3]any{"olddot", "..", 4}, [3]any{d.Application, d.Task.Task, d.Limit})
}

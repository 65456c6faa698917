package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// legacyTask makes a task as an older release could, with a name new tasks may no longer have,
// and runs it once.
func (b *testBundle) legacyTask(t *testing.T, app, task string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ($1, $2)`, app, task)
	require.NoError(t, err)
	require.NoError(t, b.client.Run(b.ctx, app, task, func(context.Context, *taskling.Execution) error { return nil }, nil))
}

// TestNamesWithASlashOverTheAPI is issue 23 item 5: a task whose name holds a slash is reached
// with it percent-encoded in its path segment (probe/a%2Fb is not probe%2Fa/b); a new one is
// refused, and so is a `by` with a bidi override.
func TestNamesWithASlashOverTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.legacyTask(t, "probe", "a/b")
	b.legacyTask(t, "probe/a", "b")

	status, body := b.do(t, "PATCH", "/api/v1/tasks/probe/a%2Fb/overrides", token, `{"concurrency_limit": 5}`)
	require.Equal(t, http.StatusOK, status, body)
	var d httpapi.TaskDetail
	b.getJSON(t, "/api/v1/tasks/probe/a%2Fb", &d)
	require.Equal(t, [3]any{"probe", "a/b", 5}, [3]any{d.Application, d.Task.Task, d.Limit})
	b.getJSON(t, "/api/v1/tasks/probe%2Fa/b", &d)
	require.Equal(t, [3]any{"probe/a", "b", 1}, [3]any{d.Application, d.Task.Task, d.Limit})
	status, body = b.do(t, "GET", "/tasks/probe/a%2Fb", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "probe/a/b")

	status, body = b.do(t, "POST", "/api/v1/tasks/probe/x%2Fy/submissions", token, `{}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	_, msg := apiErr(t, body)
	require.Contains(t, msg, `task name "x/y" contains '/'`)

	status, body = b.do(t, "PATCH", "/api/v1/tasks/probe/a%2Fb/overrides", token, `{"concurrency_limit": 4, "by": "bob\u202e"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	field, _ := apiErr(t, body)
	require.Equal(t, "by", field)
}

// TestDashboardShowsInvisibleCharactersAsText is issue 23 item 5: html/template escapes markup,
// not a right-to-left override, which the browser obeyed, reversing the rest of a task's name.
func TestDashboardShowsInvisibleCharactersAsText(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.legacyTask(t, "probe", "report\u202eslx.exe")
	for _, path := range []string{"/", "/tasks/probe/report%E2%80%AEslx.exe"} {
		status, body := b.do(t, "GET", path, "", "")
		require.Equal(t, http.StatusOK, status, path)
		require.NotContains(t, body, "\u202e", path)
		require.Contains(t, body, `report\u202eslx.exe`, path)
	}
	status, body := b.do(t, "GET", "/tasks/probe/nope%E2%80%AE", "", "")
	require.Equal(t, http.StatusNotFound, status)
	require.False(t, strings.ContainsRune(body, '\u202e'), body)
}

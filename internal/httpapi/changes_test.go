package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// TestRetireUnretireAndChangesOverTheAPI: retiring (token required) refuses starts and takes the
// task out of the list but for ?status=retired; the task page shows the retired badge and the
// changes table; every change through the API records its principal ("token" for the single
// API token) and, as its by, the note the body gives (else the principal); /changes pages the
// trail, newest first.
func TestRetireUnretireAndChangesOverTheAPI(t *testing.T) {
	t.Parallel()
	b := setupWith(t, taskling.TaskSettings{ConcurrencyLimit: 1}, nil)
	b.start(t, "export")
	const base = "/api/v1/tasks/app/export"

	status, body := b.do(t, "PATCH", base+"/overrides", token, `{"concurrency_limit": 2, "by": "alice"}`)
	require.Equal(t, http.StatusOK, status, body)
	status, body = b.do(t, "POST", base+"/retire", "", "")
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = b.do(t, "POST", base+"/retire", token, "")
	require.Equal(t, http.StatusOK, status, body)
	var task httpapi.Task
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, "token", task.Retired.By)
	require.False(t, task.HasSchedule)

	_, err := b.client.StartExecution(b.ctx, "app", "export", nil)
	require.ErrorIs(t, err, taskling.ErrTaskRetired)
	var list httpapi.TaskList
	b.getJSON(t, "/api/v1/tasks", &list)
	require.Empty(t, list.Tasks)
	require.Zero(t, list.Total)
	b.getJSON(t, "/api/v1/tasks?status=retired", &list)
	require.Len(t, list.Tasks, 1)
	require.NotNil(t, list.Tasks[0].Retired)
	status, page := b.do(t, "GET", "/tasks/app/export", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="retired-badge"`)
	status, page = b.do(t, "GET", "/?status=retired", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<span class="badge retired">retired</span>`)

	status, body = b.do(t, "PATCH", base+"/overrides", token, `{"enabled": true}`)
	require.Equal(t, http.StatusConflict, status, body)
	status, body = b.do(t, "POST", base+"/retire", token, `{"schedule_only": true}`)
	require.Equal(t, http.StatusNotFound, status, body)
	status, body = b.do(t, "POST", base+"/unretire", token, `{"by": "bob"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Nil(t, task.Retired)
	status, body = b.do(t, "DELETE", base+"/overrides", token, "")
	require.Equal(t, http.StatusOK, status, body)

	var changes httpapi.ChangePage
	b.getJSON(t, base+"/changes?limit=2", &changes)
	require.Len(t, changes.Changes, 2)
	require.Equal(t, "concurrency_limit", changes.Changes[0].Field)
	require.Equal(t, "2", *changes.Changes[0].Old)
	require.Nil(t, changes.Changes[0].New)
	require.Equal(t, "token", changes.Changes[0].By)
	require.Equal(t, "token", *changes.Changes[0].Principal)
	require.Equal(t, "bob", changes.Changes[1].By)
	require.Equal(t, "token", *changes.Changes[1].Principal)
	require.NotNil(t, changes.NextBefore)
	b.getJSON(t, base+"/changes?before="+itoa(*changes.NextBefore), &changes)
	require.Len(t, changes.Changes, 2)
	require.Nil(t, changes.NextBefore)
	require.Equal(t, "retired", changes.Changes[0].Field)
	require.Equal(t, "alice", changes.Changes[1].By)

	status, page = b.do(t, "GET", "/tasks/app/export", "", "")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, page, `id="retired-badge"`)
	require.Contains(t, page, `<td class="field">concurrency_limit</td>`)
	require.Contains(t, page, `<span class="old">inherited</span> → <span class="new">2</span>`)
	require.Contains(t, page, `<td class="principal">token</td>
  <td class="by">alice</td>`)

	for _, tc := range []struct{ method, path, body, field string }{
		{"GET", base + "/changes?limit=0", "", "limit"},
		{"GET", base + "/changes?before=x", "", "before"},
		{"POST", base + "/retire", `{"by": "a\nb"}`, "by"},
		{"POST", base + "/retire", `{"who": "a"}`, "who"},
		{"PATCH", base + "/overrides", `{"concurrency_limit": 3, "by": "a\u0000b"}`, "by"},
	} {
		status, body := b.do(t, tc.method, tc.path, token, tc.body)
		require.Equal(t, http.StatusBadRequest, status, tc.path+" "+tc.body+": "+body)
		field, _ := apiErr(t, body)
		require.Equal(t, tc.field, field, body)
	}
	status, body = b.do(t, "GET", "/api/v1/tasks/app/nope/changes", "", "")
	require.Equal(t, http.StatusNotFound, status, body)
	b.getJSON(t, base+"/changes", &changes)
	require.Len(t, changes.Changes, 4, "refused requests recorded nothing")
}

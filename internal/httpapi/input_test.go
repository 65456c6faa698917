package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
)

// doHeaders is do with request headers.
func (b *testBundle) doHeaders(t *testing.T, method, path string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, method, b.server.URL+path, nil)
	require.NoError(t, err)
	for k, v := range headers {
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	resp, err := b.server.Client().Do(req)
	require.NoError(t, err)
	return resp.StatusCode, readBody(t, resp)
}

// TestParametersPostgreSQLCannotReadAre400 is issue 40 item 7: ?q=%00 and ?q=%ff (and the
// dashboard's /?q=) reached PostgreSQL, which refused them (SQLSTATE 22021): a 500 and a stack
// trace in the log. So did a cursor holding a NUL. Every query parameter, and the headers the
// server reads, hold the characters of names or get a 400 naming them.
func TestParametersPostgreSQLCannotReadAre400(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.start(t, "export")
	nulCursor := base64.RawURLEncoding.EncodeToString([]byte(`{"s":"name","a":"\u0000","t":"x","i":1}`))
	for _, c := range []struct{ path, field string }{
		{"/api/v1/tasks?q=%00", "q"},
		{"/api/v1/tasks?q=%ff", "q"},
		{"/api/v1/tasks?q=a%0Ab", "q"},
		{"/api/v1/tasks?limit=5&cursor=" + nulCursor, "cursor"},
		{"/api/v1/tasks/app/export/executions?status=%ff", "status"},
		{"/api/v1/tasks/app/export/changes?before=%00", "before"},
		{"/api/v1/tasks/app/export/blocks?at_retry_limit=%c0", "at_retry_limit"},
		{"/api/v1/tasks?%ff=1", "\ufffd"}, // a parameter's name too (JSON shows the byte as U+FFFD)
	} {
		status, body := b.do(t, "GET", c.path, "", "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", c.path, body)
		field, _ := apiErr(t, body)
		require.Equal(t, c.field, field, c.path)
	}
	for _, path := range []string{"/?q=%00", "/?q=%ff", "/?limit=5&cursor=" + nulCursor, "/tasks/app/export?x=%00"} {
		status, body := b.do(t, "GET", path, "", "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", path, body)
	}
	// The sign-in page ignores a next that is not a path inside the dashboard, as it did.
	status, body := b.do(t, "GET", "/login?next=%09%2F%2Fevil.example%ff", "", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="login-form"`)
	require.NotContains(t, body, "evil.example")
	for _, h := range []string{"Authorization", "Content-Type", "X-Taskling-Partial"} {
		status, body := b.doHeaders(t, "GET", "/api/v1/tasks", map[string]string{h: "Bearer \xff"})
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", h, body)
		field, _ := apiErr(t, body)
		require.Equal(t, h, field)
	}
}

// TestALaterVersionsTraceparentWithBytesTextCannotHoldIsIgnored is issue 40 item 7: a traceparent
// of version 01 may carry more after its 55 characters; a \xff there was stored as text, which
// PostgreSQL refused: a 500 on submit, where the docs say a malformed traceparent is ignored.
func TestALaterVersionsTraceparentWithBytesTextCannotHoldIsIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	const head = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tp := range []string{head + "-\xff", head + "-a\tb", head + "-\u00e9"} {
		status, body := b.doHeaders(t, "POST", "/api/v1/tasks/app/export/submissions",
			map[string]string{"Authorization": "Bearer " + token, "traceparent": tp, "tracestate": "a=1"})
		require.Equal(t, http.StatusCreated, status, "%q: %s", tp, body)
		var created httpapi.SubmitResponse
		require.NoError(t, json.Unmarshal([]byte(body), &created))
		require.True(t, b.submission(t, created.ID).Trace.IsZero(), "%q: ignored", tp)
	}
	status, body := b.doHeaders(t, "POST", "/api/v1/tasks/app/export/submissions",
		map[string]string{"Authorization": "Bearer " + token, "traceparent": head + "-later"})
	require.Equal(t, http.StatusCreated, status, body)
	var created httpapi.SubmitResponse
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	require.Equal(t, head+"-later", b.submission(t, created.ID).Trace.Traceparent, "a later version's printable rest is kept")
}

// TestTheKeyInTheQueryReachesDotKeysAndTheEmptyKey is issue 40 item 8: the dashboard's key form
// with key "." sent PUT …/keys/. and the browser sent …/keys/, which changed the empty key. The
// key now travels as ?key= (any key: ".", "..", "" the empty key); the older route keeps serving
// other keys and refuses an empty segment, which is what keys/. becomes; the overridden empty
// key is listed although nothing holds it.
func TestTheKeyInTheQueryReachesDotKeysAndTheEmptyKey(t *testing.T) {
	t.Parallel()
	s := fast
	s.ConcurrencyLimit = 4
	b := setupWith(t, s, nil)
	require.NoError(t, b.start(t, "export").Complete(b.ctx))

	status, body := b.do(t, "PUT", "/api/v1/tasks/app/export/keys?key=", token, `{"limit": 2}`)
	require.Equal(t, http.StatusOK, status, body)
	var task httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, 1, task.KeysTotal, "the overridden empty key is listed: %s", body)
	require.Equal(t, httpapi.Key{Key: "", Limit: ptr(2), LimitSource: "override", RateSource: "none", NextAllowed: "0s"}, task.Keys[0])

	for _, key := range []string{".", "..", "a b&c=d"} {
		status, body := b.do(t, "PUT", "/api/v1/tasks/app/export/keys?key="+url.QueryEscape(key), token, `{"limit": 3}`)
		require.Equal(t, http.StatusOK, status, body)
	}
	status, body = b.do(t, "PUT", "/api/v1/tasks/app/export/keys/acme", token, `{"limit": 1}`)
	require.Equal(t, http.StatusOK, status, "the older route serves other keys: %s", body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	limits := map[string]int{}
	for _, k := range task.Keys {
		limits[k.Key] = *k.Limit
	}
	require.Equal(t, map[string]int{"": 2, ".": 3, "..": 3, "a b&c=d": 3, "acme": 1}, limits, "the empty key kept its limit")

	var changes httpapi.ChangePage
	b.getJSON(t, "/api/v1/tasks/app/export/changes", &changes)
	var fields []string
	for _, c := range changes.Changes {
		fields = append(fields, c.Field)
	}
	require.ElementsMatch(t, []string{"key_limit[]", "key_limit[.]", "key_limit[..]", "key_limit[a b&c=d]", "key_limit[acme]"}, fields)

	status, body = b.do(t, "DELETE", "/api/v1/tasks/app/export/keys?key=.", token, "")
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, 4, task.KeysTotal, "key . cleared, the others kept")

	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/tasks/app/export/keys/", `{"limit": 5}`}, // what a client makes of keys/.
		{"DELETE", "/api/v1/tasks/app/export/keys/", ""},
		{"PUT", "/api/v1/tasks/app/export/keys", `{"limit": 5}`}, // no key at all
		{"PUT", "/api/v1/tasks/app/export/keys/acme?key=b", `{"limit": 5}`},
		{"PUT", "/api/v1/tasks/app/export/keys?key=a%E2%80%AEb", `{"limit": 5}`},
	} {
		status, body := b.do(t, c.method, c.path, token, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", c.method, c.path, body)
		field, _ := apiErr(t, body)
		require.Equal(t, "key", field, body)
	}
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Equal(t, 2, *task.Keys[0].Limit, "the empty key is unchanged")
}

// TestTasksNamedDotSegmentsAreReachedWithTheirNamesInTheQuery is issue 40 item 8: a task named
// "." or ".." is a path segment that browsers drop, so its dashboard link led to another page. New
// tasks may not be so named; one made before is served at /task and /api/v1/task…?app=&task=, and
// the pages link it there.
func TestTasksNamedDotSegmentsAreReachedWithTheirNamesInTheQuery(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.legacyTask(t, "dotapp", "..")
	b.legacyTask(t, ".", "x")

	for _, c := range []struct{ path, msg string }{
		{"/api/v1/task/submissions?app=dotapp&task=.", `task name is "."`},
		{"/api/v1/tasks/newapp/%2E%2E/submissions", `task name is ".."`},
		{"/api/v1/task/submissions?app=..&task=y", `application name is ".."`},
	} {
		status, body := b.do(t, "POST", c.path, token, `{}`)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", c.path, body)
		_, msg := apiErr(t, body)
		require.Contains(t, msg, c.msg)
	}

	status, body := b.do(t, "PATCH", "/api/v1/task/overrides?app=dotapp&task=..", token, `{"concurrency_limit": 3}`)
	require.Equal(t, http.StatusOK, status, body)
	var d httpapi.TaskDetail
	b.getJSON(t, "/api/v1/task?app=dotapp&task=..", &d)
	require.Equal(t, [3]any{"dotapp", "..", 3}, [3]any{d.Application, d.Task.Task, d.Limit})
	var execs httpapi.ExecutionPage
	b.getJSON(t, "/api/v1/task/executions?app=.&task=x", &execs)
	require.Len(t, execs.Executions, 1)
	status, body = b.do(t, "PUT", "/api/v1/task/keys?app=dotapp&task=..&key=..", token, `{"limit": 1}`)
	require.Equal(t, http.StatusOK, status, body)
	status, body = b.do(t, "GET", "/api/v1/task?app=dotapp", "", "")
	require.Equal(t, http.StatusBadRequest, status, body)
	field, _ := apiErr(t, body)
	require.Equal(t, "task", field)
	status, body = b.do(t, "DELETE", "/api/v1/task", token, "")
	require.Equal(t, http.StatusMethodNotAllowed, status, body)

	status, page := b.do(t, "GET", "/", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `href="task?app=dotapp&amp;task=..">dotapp/..</a>`)
	require.Contains(t, page, `href="task?app=.&amp;task=x">./x</a>`)
	status, page = b.do(t, "GET", "/task?app=dotapp&task=..", token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "<h1>dotapp/..")
	require.Contains(t, page, `data-api="api/v1/task/overrides?app=dotapp&amp;task=.."`)
	require.Contains(t, page, `data-api="api/v1/task/keys?app=dotapp&amp;task=.."`)
}

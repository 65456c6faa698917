package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// fuzzTarget is the handler the fuzz targets send to, with the token, in front of a database
// holding task app/export with a running execution (key acme).
func fuzzTarget(f *testing.F) *httpapi.Handler {
	pool, _ := pgtest.NewDB(f)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "fuzz-host", Defaults: fast})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(client.Close)
	e, err := client.StartExecution(context.Background(), "app", "export", &taskling.StartOptions{ReferenceValue: "r", Key: "acme"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = e.Complete(context.Background()) })
	h, err := httpapi.New(client, &httpapi.Options{Token: token})
	if err != nil {
		f.Fatal(err)
	}
	return h
}

// FuzzHandler sends random methods, paths and bodies, with and without the token, to the handler
// in front of a real database: whatever arrives, the answer is never a 5xx and nothing panics.
// `go test` runs the seeds; `go test -fuzz FuzzHandler ./internal/httpapi` explores.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct {
		method, path, body string
		auth               bool
	}{
		{"GET", "/api/v1/tasks", "", false},
		{"GET", "/api/v1/tasks/app/export", "", true},
		{"GET", "/api/v1/tasks/app/export/executions?status=failed&limit=3&before=99", "", true},
		{"GET", "/api/v1/executions/1", "", true},
		{"GET", "/api/v1/executions/99999999999999999999", "", true},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"concurrency_limit": 3}`, true},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"concurrency_limit": 1e99}`, true},
		{"PATCH", "/api/v1/tasks/app/%00/overrides", `{"enabled": false}`, true},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"keep_alive_interval": "9223372036854775807ns"}`, true},
		{"DELETE", "/api/v1/tasks/a%2Fb/c/overrides", "", true},
		{"POST", "/api/v1/tasks/app/export/submissions", `{"header": {"a": 1}, "reference_value": "r", "priority": 2, "max_attempts": 3}`, true},
		{"POST", "/api/v1/tasks/app/export/submissions", `{"priority": -9223372036854775808, "header": nul}`, true},
		{"POST", "/api/v1/tasks/app/new/submissions", "", true},
		{"GET", "/api/v1/tasks/app/export/submissions?status=waiting&limit=1000&before=1", "", true},
		{"GET", "/api/v1/submissions/1", "", true},
		{"GET", "/api/v1/submissions/-1", "", true},
		{"POST", "/api/v1/submissions/1/cancel", `{"reason": "\u0000"}`, true},
		{"POST", "/api/v1/submissions/99999999999999999999/cancel", "", true},
		{"GET", "/submissions/1", "", true},
		{"GET", "/submissions/%00", "", true},
		{"GET", "/tasks/app/export", "", true},
		{"GET", "/tasks/%ff/%fe", "", true},
		{"POST", "/login", "token=x&next=//evil", false},
		{"GET", "/login?next=..%2f..%2f", "", false},
		{"GET", "/metrics", "", true},
		{"OPTIONS", "/api/v1/tasks", "", false},
		{"GET", "/static/../../etc/passwd", "", false},
	} {
		f.Add(s.method, s.path, s.body, s.auth)
	}
	h := fuzzTarget(f)
	f.Fuzz(func(t *testing.T, method, path, body string, auth bool) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequestWithContext(context.Background(), method, "http://taskling.test"+path, strings.NewReader(body))
		if err != nil {
			return // not a request a server could receive
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body.String())
		}
	})
}

// everyParameter lists every route the handler serves (httpapi.Patterns) with what it reads
// beside its path values: query parameters and headers. FuzzEveryParameter checks that the list
// is complete.
var everyParameter = []struct {
	pattern        string
	query, headers []string
	body           string
}{
	{pattern: "GET /api/v1/tasks", query: []string{"q", "app", "status", "sort", "limit", "cursor"}},
	{pattern: "GET /api/v1/tasks/{app}/{task}"},
	{pattern: "GET /api/v1/task", query: []string{"app", "task"}},
	{pattern: "GET /api/v1/tasks/{app}/{task}/executions", query: []string{"status", "before", "limit"}},
	{pattern: "GET /api/v1/task/executions", query: []string{"app", "task", "status", "before", "limit"}},
	{pattern: "GET /api/v1/executions/{id}"},
	{pattern: "PATCH /api/v1/tasks/{app}/{task}/overrides", headers: []string{"Content-Type"}, body: `{"concurrency_limit": 3}`},
	{pattern: "PATCH /api/v1/task/overrides", query: []string{"app", "task"}, body: `{"concurrency_limit": 3}`},
	{pattern: "DELETE /api/v1/tasks/{app}/{task}/overrides"},
	{pattern: "DELETE /api/v1/task/overrides", query: []string{"app", "task"}},
	{pattern: "PUT /api/v1/tasks/{app}/{task}/keys", query: []string{"key"}, body: `{"limit": 2}`},
	{pattern: "PUT /api/v1/task/keys", query: []string{"app", "task", "key"}, body: `{"limit": 2}`},
	{pattern: "DELETE /api/v1/tasks/{app}/{task}/keys", query: []string{"key"}},
	{pattern: "DELETE /api/v1/task/keys", query: []string{"app", "task", "key"}},
	{pattern: "PUT /api/v1/tasks/{app}/{task}/keys/{key}", query: []string{"key"}, body: `{"limit": 2}`},
	{pattern: "PUT /api/v1/tasks/{app}/{task}/keys/{$}", body: `{"limit": 2}`},
	{pattern: "DELETE /api/v1/tasks/{app}/{task}/keys/{key}"},
	{pattern: "DELETE /api/v1/tasks/{app}/{task}/keys/{$}"},
	{pattern: "POST /api/v1/tasks/{app}/{task}/retire", body: `{"schedule_only": true}`},
	{pattern: "POST /api/v1/task/retire", query: []string{"app", "task"}, body: `{"schedule_only": true}`},
	{pattern: "POST /api/v1/tasks/{app}/{task}/unretire", body: `{"schedule_only": true}`},
	{pattern: "POST /api/v1/task/unretire", query: []string{"app", "task"}, body: `{"schedule_only": true}`},
	{pattern: "GET /api/v1/tasks/{app}/{task}/changes", query: []string{"before", "limit"}},
	{pattern: "GET /api/v1/task/changes", query: []string{"app", "task", "before", "limit"}},
	{pattern: "GET /api/v1/tasks/{app}/{task}/submissions", query: []string{"status", "before", "limit"}},
	{pattern: "GET /api/v1/task/submissions", query: []string{"app", "task", "status", "before", "limit"}},
	{pattern: "POST /api/v1/tasks/{app}/{task}/submissions", headers: []string{"traceparent", "tracestate"}, body: `{"key": "k"}`},
	{pattern: "POST /api/v1/task/submissions", query: []string{"app", "task"}, headers: []string{"traceparent", "tracestate"}},
	{pattern: "GET /api/v1/submissions/{id}"},
	{pattern: "POST /api/v1/submissions/{id}/cancel"},
	{pattern: "GET /api/v1/executions/{id}/blocks"},
	{pattern: "GET /api/v1/tasks/{app}/{task}/blocks", query: []string{"at_retry_limit", "limit"}},
	{pattern: "GET /api/v1/task/blocks", query: []string{"app", "task", "at_retry_limit", "limit"}},
	{pattern: "GET /api/v1/blocks/{id}"},
	{pattern: "POST /api/v1/blocks/{id}/force"},
	{pattern: "GET /metrics"},
	{pattern: "GET /{$}", query: []string{"q", "app", "status", "sort", "limit", "cursor"}, headers: []string{"X-Taskling-Partial"}},
	{pattern: "GET /tasks/{app}/{task}", headers: []string{"X-Taskling-Partial"}},
	{pattern: "GET /task", query: []string{"app", "task"}},
	{pattern: "GET /submissions/{id}"},
	{pattern: "GET /executions/{id}"},
	{pattern: "GET /blocks/{id}"},
	{pattern: "GET /login", query: []string{"next"}},
	{pattern: "POST /login", headers: []string{"X-Forwarded-Proto"}},
	{pattern: "POST /logout", headers: []string{"Cookie"}},
	{pattern: "GET /static/", query: []string{"v"}},
	// Read by every request: tried on one read and one change.
	{pattern: "GET /api/v1/tasks", headers: []string{"Authorization", "Cookie", requestHeaderName}},
	{pattern: "PATCH /api/v1/tasks/{app}/{task}/overrides", headers: []string{"Authorization", requestHeaderName}, body: `{"enabled": true}`},
}

const requestHeaderName = "X-Taskling-Request"

// FuzzEveryParameter puts one value in every parameter of every route in turn — each path value,
// query parameter and header the server reads (issue 40 item 7: ?q=%00 answered 500) — in front
// of a real database: whatever the value, no answer is a 5xx. `go test` runs the seeds; `go test
// -fuzz FuzzEveryParameter ./internal/httpapi` explores.
func FuzzEveryParameter(f *testing.F) {
	for _, s := range []string{
		"", "\x00", "\xff", "%", ".", "..", "a\nb", "\u202e", "-1", "99999999999999999999", "true",
		strings.Repeat("é", 150), "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\xff",
		"eyJzIjoibmFtZSIsImEiOiJcdTAwMDAiLCJ0IjoieCIsImkiOjF9", // a cursor whose application is a NUL
	} {
		f.Add(s)
	}
	h := fuzzTarget(f)
	listed := map[string]bool{}
	for _, r := range everyParameter {
		listed[r.pattern] = true
	}
	for _, p := range httpapi.Patterns(h) {
		if !listed[p] {
			f.Fatalf("route %q is not in everyParameter: list it with the parameters it reads", p)
		}
	}
	var sent atomic.Uint32
	defaults := map[string]string{"{app}": "app", "{task}": "export", "{id}": "1", "{key}": "acme", "{$}": ""}
	f.Fuzz(func(t *testing.T, value string) {
		for _, r := range everyParameter {
			method, path, _ := strings.Cut(r.pattern, " ")
			send := func(what string, set func(path string, q url.Values, hdr http.Header) string) {
				q := url.Values{}
				for _, name := range r.query {
					if d, ok := map[string]string{"app": "app", "task": "export", "key": "acme"}[name]; ok {
						q.Set(name, d)
					}
				}
				hdr := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
				p := path
				for seg, d := range defaults {
					if seg != what {
						p = strings.ReplaceAll(p, seg, d)
					}
				}
				p = set(p, q, hdr)
				target := "http://taskling.test" + p
				if len(q) > 0 {
					target += "?" + q.Encode()
				}
				req := httptest.NewRequestWithContext(context.Background(), method, target, strings.NewReader(r.body))
				req.Header = hdr
				// An address per request: refused sign-ins must not lock the next requests out.
				n := sent.Add(1)
				req.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1", n>>16&255, n>>8&255, n&255)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code >= 500 {
					t.Fatalf("%s with %s = %q: %d %s", r.pattern, what, value, rec.Code, rec.Body.String())
				}
			}
			for _, seg := range []string{"{app}", "{task}", "{id}", "{key}"} {
				if strings.Contains(path, seg) {
					send(seg, func(p string, _ url.Values, _ http.Header) string {
						return strings.ReplaceAll(p, seg, url.PathEscape(value))
					})
				}
			}
			for _, name := range r.query {
				send(name, func(p string, q url.Values, _ http.Header) string { q.Set(name, value); return p })
			}
			for _, name := range r.headers {
				send(name, func(p string, _ url.Values, hdr http.Header) string {
					hdr[http.CanonicalHeaderKey(name)] = []string{value}
					return p
				})
			}
		}
	})
}

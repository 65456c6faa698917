package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

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
	pool, _ := pgtest.NewDB(f)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "fuzz-host", Defaults: fast})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(client.Close)
	e, err := client.StartExecution(context.Background(), "app", "export", &taskling.StartOptions{ReferenceValue: "r"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = e.Complete(context.Background()) })
	h, err := httpapi.New(client, &httpapi.Options{Token: token})
	if err != nil {
		f.Fatal(err)
	}
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

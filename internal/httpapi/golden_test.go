package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden/*.json from this run")

// TestEveryEndpointsJSONMatchesItsGoldenFile pins the HTTP API's JSON: a fixed scenario (a task
// with history, holders, a waiting queue, overrides and changes, submissions, blocks) is read
// through every endpoint and each answer compared with testdata/golden. Only what differs from run
// to run is masked: times, durations measured from now, and ids (numbered in order of first
// appearance, so that an answer still shows which rows are the same). A change of a field's name,
// type, presence or value fails it; refresh on purpose with -update-golden.
func TestEveryEndpointsJSONMatchesItsGoldenFile(t *testing.T) {
	t.Parallel()
	b := setupWith(t, taskling.TaskSettings{ConcurrencyLimit: 2}, &httpapi.Options{Token: token, PublicReads: true})
	ids := goldenScenario(t, b)
	ids.mask = newIDMask()
	for _, ep := range ids.endpoints() {
		status, body := b.do(t, ep.method, ep.path, token, ep.body)
		got := ids.mask.normalize(t, status, body)
		file := filepath.Join("testdata", "golden", ep.name+".json")
		if *updateGolden {
			require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
			require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
			continue
		}
		want, err := os.ReadFile(file)
		require.NoError(t, err, "no golden file for %s (run with -update-golden)", ep.name)
		require.Equal(t, string(want), got, "%s %s: JSON differs from %s", ep.method, ep.path, file)
	}
}

type goldenIDs struct {
	mask                *idMask
	running, done, sub  int64
	waitingSub, block   int64
	blockExec, canceled int64
}

type endpoint struct{ name, method, path, body string }

// endpoints lists every API route with the request the golden file answers; the changes come
// last, since reads must see the state before them.
func (g *goldenIDs) endpoints() []endpoint {
	return []endpoint{
		{"tasks", "GET", "/api/v1/tasks", ""},
		{"tasks_retired", "GET", "/api/v1/tasks?status=retired", ""},
		{"task", "GET", "/api/v1/tasks/app/task", ""},
		{"task_executions", "GET", "/api/v1/tasks/app/task/executions", ""},
		{"execution", "GET", fmt.Sprintf("/api/v1/executions/%d", g.done), ""},
		{"execution_running", "GET", fmt.Sprintf("/api/v1/executions/%d", g.running), ""},
		{"task_changes", "GET", "/api/v1/tasks/app/task/changes", ""},
		{"task_submissions", "GET", "/api/v1/tasks/app/jobs/submissions", ""},
		{"submission", "GET", fmt.Sprintf("/api/v1/submissions/%d", g.sub), ""},
		{"submission_cancelled", "GET", fmt.Sprintf("/api/v1/submissions/%d", g.canceled), ""},
		{"execution_blocks", "GET", fmt.Sprintf("/api/v1/executions/%d/blocks", g.blockExec), ""},
		{"task_blocks", "GET", "/api/v1/tasks/app/blocks/blocks", ""},
		{"block", "GET", fmt.Sprintf("/api/v1/blocks/%d", g.block), ""},
		{"not_found", "GET", "/api/v1/executions/999999", ""},
		{"bad_request", "PATCH", "/api/v1/tasks/app/task/overrides", `{"concurrency_limit":0}`},
		{"method_not_allowed", "PUT", "/api/v1/tasks", ""},
		{"no_route", "GET", "/api/v1/nothing", ""},
		{"set_overrides", "PATCH", "/api/v1/tasks/app/other/overrides", `{"concurrency_limit":3,"by":"alice"}`},
		{"clear_overrides", "DELETE", "/api/v1/tasks/app/other/overrides", `{"by":"alice"}`},
		{"retire", "POST", "/api/v1/tasks/app/other/retire", `{"by":"alice"}`},
		{"unretire", "POST", "/api/v1/tasks/app/other/unretire", `{"by":"alice"}`},
		{"submit", "POST", "/api/v1/tasks/app/jobs/submissions", `{"reference_value":"r-2","header":{"n":2},"priority":1}`},
		{"cancel_submission", "POST", fmt.Sprintf("/api/v1/submissions/%d/cancel", g.waitingSub), `{"reason":"not needed","by":"alice"}`},
		{"force_block", "POST", fmt.Sprintf("/api/v1/blocks/%d/force", g.block), `{"by":"alice"}`},
	}
}

// goldenScenario builds the state the endpoints read.
func goldenScenario(t *testing.T, b *testBundle) *goldenIDs {
	t.Helper()
	ctx := b.ctx
	var g goldenIDs
	// app/task: one completed execution with events and progress, one running, one denied.
	e, err := b.client.StartExecution(ctx, "app", "task", &taskling.StartOptions{ReferenceValue: "2026-11-21.csv", Header: map[string]any{"file": "a.csv", "rows": 3}})
	require.NoError(t, err)
	require.NoError(t, e.Checkpoint(ctx, "halfway"))
	require.NoError(t, e.SetProgress(ctx, 2, 3))
	require.NoError(t, e.RecordError(ctx, "row 2 skipped", false))
	require.NoError(t, e.Complete(ctx))
	g.done = e.ID()
	limit := 1
	require.NoError(t, b.client.UpdateTaskSettings(ctx, "app", "task", taskling.SettingsUpdate{ConcurrencyLimit: &limit, By: "bob"}))
	run, err := b.client.StartExecution(ctx, "app", "task", &taskling.StartOptions{ReferenceValue: "2026-11-22.csv"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = run.Complete(context.Background()) })
	g.running = run.ID()
	_, err = b.client.StartExecution(ctx, "app", "task", &taskling.StartOptions{ReferenceValue: "2026-11-23.csv"})
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	// app/other: changed through the API at the end; app/gone: retired.
	o, err := b.client.StartExecution(ctx, "app", "other", nil)
	require.NoError(t, err)
	require.NoError(t, o.Complete(ctx))
	gone, err := b.client.StartExecution(ctx, "app", "gone", nil)
	require.NoError(t, err)
	require.NoError(t, gone.Complete(ctx))
	require.NoError(t, b.client.RetireTask(ctx, "app", "gone", "carol"))
	// app/jobs: a completed submission, a cancelled one and a waiting one.
	g.sub, err = b.client.Submit(ctx, "app", "jobs", &taskling.SubmitOptions{ReferenceValue: "r-1", Header: map[string]any{"n": 1},
		TraceContext: taskling.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: "rojo=00f067aa0ba902b7"}})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.client.Work(wctx, "app", "jobs", func(ctx context.Context, e *taskling.Execution) error {
			return e.SetProgress(ctx, 1, 1)
		}, nil)
	}()
	require.Eventually(t, func() bool {
		s, err := b.client.Submission(ctx, g.sub)
		return err == nil && s.Status == taskling.SubmissionCompleted
	}, 20*time.Second, 20*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	g.canceled, err = b.client.Submit(ctx, "app", "jobs", &taskling.SubmitOptions{ReferenceValue: "r-cancelled"})
	require.NoError(t, err)
	_, err = b.client.CancelSubmissionBy(ctx, g.canceled, "duplicate", "dave")
	require.NoError(t, err)
	g.waitingSub, err = b.client.Submit(ctx, "app", "jobs", &taskling.SubmitOptions{ReferenceValue: "r-waiting", Priority: 2})
	require.NoError(t, err)
	// app/blocks: numeric blocks, one completed, one failed, one left.
	be, err := b.client.StartExecution(ctx, "app", "blocks", nil)
	require.NoError(t, err)
	blocks, err := be.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 30, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.NoError(t, blocks[0].Start(ctx))
	require.NoError(t, blocks[0].Complete(ctx, 10))
	require.NoError(t, blocks[1].Start(ctx))
	require.NoError(t, blocks[1].Fail(ctx, "bad row"))
	require.NoError(t, be.Complete(ctx))
	g.block, g.blockExec = blocks[0].ID, be.ID()
	return &g
}

// idMask rewrites what differs between runs.
type idMask struct{ ids map[string]string }

func newIDMask() *idMask { return &idMask{ids: map[string]string{}} }

var (
	timeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`)
	// Keys whose values are measured from now, or depend on the clock.
	clockKeys = map[string]bool{"oldest_wait_seconds": true, "expires_in_ms": true, "age_seconds": true,
		"duration_ms": true, "lease_ms": true, "waited_ms": true, "heartbeat_age": true, "heartbeat_age_seconds": true}
	uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	idKey  = regexp.MustCompile(`(^id$|_id$|_executions$|^fence$|^fencing_token$)`)
)

// normalize returns status and body as a stable, indented JSON document.
func (m *idMask) normalize(t *testing.T, status int, body string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v), body)
	v = m.walk("", v)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(map[string]any{"status": status, "body": v}))
	return out.String()
}

func (m *idMask) walk(key string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x[k] = m.walk(k, x[k])
		}
		return x
	case []any:
		for i := range x {
			x[i] = m.walk(key, x[i])
		}
		return x
	case string:
		switch {
		case clockKeys[key]:
			return "<clock>"
		case timeRE.MatchString(x):
			return "<time>"
		case uuidRE.MatchString(x):
			return m.id("uuid", x)
		}
		return x
	case json.Number:
		switch {
		case clockKeys[key]:
			return "<clock>"
		case idKey.MatchString(key):
			return m.id(key, x.String())
		}
		return x
	}
	return v
}

// id numbers the ids of one key by first appearance ("execution_id#2").
func (m *idMask) id(key, v string) string {
	k := key + "=" + v
	if s, ok := m.ids[k]; ok {
		return s
	}
	n := 1
	for kk := range m.ids {
		if strings.HasPrefix(kk, key+"=") {
			n++
		}
	}
	m.ids[k] = fmt.Sprintf("<%s#%d>", key, n)
	return m.ids[k]
}

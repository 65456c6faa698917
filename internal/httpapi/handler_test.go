package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/testutil"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

func TestMain(m *testing.M) {
	// httptest's server closes idle keep-alive connections asynchronously.
	testutil.VerifyNoLeaks(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// token is a base64 token as `openssl rand -base64 32` makes them: with "+", "/" and "=".
const token = "q8+Fh0/k2Zs9v3Rn+Lw1PcYx7Tg4Bm6Ne5Jd0Ua2Hi8="

type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	client *taskling.Client
	server *httptest.Server
}

// fast heartbeats often, and a holder lives 20 s without one: these tests count holders as live, and a
// 1 s threshold let a loaded machine declare one dead mid-test (tests of dead holders use their own).
var fast = taskling.TaskSettings{KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: 20 * time.Second}

func setup(t *testing.T, limit int, opts *httpapi.Options) *testBundle {
	t.Helper()
	s := fast
	s.ConcurrencyLimit = limit
	return setupWith(t, s, opts)
}

// setupWith is setup with the clients' default settings.
func setupWith(t *testing.T, s taskling.TaskSettings, opts *httpapi.Options) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host", Defaults: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	if opts == nil {
		opts = &httpapi.Options{Token: token, PublicReads: true}
	}
	h, err := httpapi.New(client, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testBundle{ctx: context.Background(), pool: pool, client: client, server: srv}
}

func (b *testBundle) start(t *testing.T, task string) *taskling.Execution {
	t.Helper()
	e, err := b.client.StartExecution(b.ctx, "app", task, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Complete(context.Background()) })
	return e
}

// do sends a request and returns the status and the body; auth is the bearer token ("" none).
func (b *testBundle) do(t *testing.T, method, path, auth, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(b.ctx, method, b.server.URL+path, rd)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.server.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}

func (b *testBundle) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	status, body := b.do(t, "GET", path, "", "")
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), v), body)
}

// apiErr decodes an error body.
func apiErr(t *testing.T, body string) (field, message string) {
	t.Helper()
	var e struct {
		Error struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	require.NotEmpty(t, e.Error.Message, body)
	return e.Error.Field, e.Error.Message
}

func TestEveryReadRouteServesTasksSlotsExecutionsAndMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, nil)
	done, err := b.client.StartExecution(b.ctx, "app", "export", &taskling.StartOptions{ReferenceValue: "day-1", Header: map[string]int{"rows": 5}})
	require.NoError(t, err)
	require.NoError(t, done.Checkpoint(b.ctx, "half way"))
	require.NoError(t, done.Complete(b.ctx))
	running := b.start(t, "export")
	require.NoError(t, running.SetProgress(b.ctx, 3, 10))
	b.start(t, "export")
	_, err = b.client.StartExecution(b.ctx, "app", "export", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)

	var list struct{ Tasks []httpapi.Task }
	b.getJSON(t, "/api/v1/tasks", &list)
	require.Len(t, list.Tasks, 1)
	task := list.Tasks[0]
	require.Equal(t, "export", task.Task)
	require.Equal(t, 2, task.Limit)
	require.Equal(t, "declared", task.LimitSource)
	require.Equal(t, 2, task.SlotsUsed)
	require.Equal(t, 2, task.SlotsTotal)
	require.Equal(t, "blocked", task.LastExecution.Status)

	var detail httpapi.TaskDetail
	b.getJSON(t, "/api/v1/tasks/app/export", &detail)
	require.Len(t, detail.Slots, 2)
	fences := map[int64]bool{}
	for _, s := range detail.Slots {
		require.Equal(t, "held", s.Status)
		require.True(t, s.Holder.Found)
		require.True(t, s.Holder.Alive)
		require.Equal(t, "test-host", s.Holder.Host)
		fences[s.Holder.Fence] = true
		if s.Holder.ExecutionID == running.ID() {
			require.Equal(t, int64(3), *s.Holder.ItemsDone)
		}
	}
	require.Equal(t, map[int64]bool{2: true, 3: true}, fences)

	var page httpapi.ExecutionPage
	b.getJSON(t, "/api/v1/tasks/app/export/executions?limit=2", &page)
	require.Len(t, page.Executions, 2)
	require.Equal(t, "blocked", page.Executions[0].Status)
	require.NotNil(t, page.NextBefore)
	var rest httpapi.ExecutionPage
	b.getJSON(t, "/api/v1/tasks/app/export/executions?before="+itoa(*page.NextBefore), &rest)
	require.Len(t, rest.Executions, 2)
	require.Nil(t, rest.NextBefore)
	require.Equal(t, done.ID(), rest.Executions[1].ID)
	var completed httpapi.ExecutionPage
	b.getJSON(t, "/api/v1/tasks/app/export/executions?status=completed", &completed)
	require.Len(t, completed.Executions, 1)
	require.Equal(t, done.ID(), completed.Executions[0].ID)

	var one httpapi.Execution
	b.getJSON(t, "/api/v1/executions/"+itoa(running.ID()), &one)
	require.Equal(t, "in_progress", one.Status)
	require.Equal(t, int64(3), *one.ItemsDone)
	require.Equal(t, int64(10), *one.ItemsTotal)
	b.getJSON(t, "/api/v1/executions/"+itoa(done.ID()), &one)
	require.Equal(t, "completed", one.Status)
	require.Equal(t, "day-1", *one.ReferenceValue)
	require.JSONEq(t, `{"rows": 5}`, string(one.Header))
	var types []string
	for _, e := range one.Events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{"start", "checkpoint", "end"}, types)

	status, body := b.do(t, "GET", "/metrics", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `taskling_grants_total{task="app/export"} 3`)
	require.Contains(t, body, `taskling_slots_in_use{task="app/export"} 2`)

	status, body = b.do(t, "GET", "/", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `href="tasks/app/export"`)
	status, body = b.do(t, "GET", "/tasks/app/export", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `id="progress-`+itoa(running.ID())+`" value="3" max="10"`)
	require.Contains(t, body, `href="../../static/dashboard.css"`)
	status, body = b.do(t, "GET", "/static/dashboard.js", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "limit-form")
}

func itoa(n int64) string { return strings.TrimSpace(string(must(json.Marshal(n)))) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestMutationsNeedTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.start(t, "export")
	const path = "/api/v1/tasks/app/export/overrides"

	for _, auth := range []string{"", "wrong"} {
		status, body := b.do(t, "PATCH", path, auth, `{"concurrency_limit": 2}`)
		require.Equal(t, http.StatusUnauthorized, status, body)
		field, _ := apiErr(t, body)
		require.Equal(t, "Authorization", field)
		status, _ = b.do(t, "DELETE", path, auth, "")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	var task httpapi.Task
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Equal(t, "declared", task.LimitSource, "a refused mutation changed nothing")

	status, body := b.do(t, "PATCH", path, token, `{"concurrency_limit": 2}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, 2, task.Limit)
	require.Equal(t, "override", task.LimitSource)
	status, body = b.do(t, "DELETE", path, token, "")
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, "declared", task.LimitSource)
}

func TestServerWithoutTokenIsReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, &httpapi.Options{})
	b.start(t, "export")
	status, body := b.do(t, "PATCH", "/api/v1/tasks/app/export/overrides", "anything", `{"concurrency_limit": 2}`)
	require.Equal(t, http.StatusForbidden, status, body)
	_, msg := apiErr(t, body)
	require.Contains(t, msg, "read-only")
	status, _ = b.do(t, "GET", "/api/v1/tasks", "", "")
	require.Equal(t, http.StatusOK, status)
}

// TestReadsAreProtectedByDefaultWithAToken is issue 15 item 8: with a token, reads (headers,
// reference values, errors, host names) and /metrics need it unless opened on purpose.
func TestReadsAreProtectedByDefaultWithAToken(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, &httpapi.Options{Token: token})
	b.start(t, "export")
	reads := []string{"/api/v1/tasks", "/api/v1/tasks/app/export", "/api/v1/tasks/app/export/executions", "/api/v1/executions/1", "/metrics"}
	for _, path := range reads {
		status, body := b.do(t, "GET", path, "", "")
		require.Equal(t, http.StatusUnauthorized, status, path+": "+body)
		status, body = b.do(t, "GET", path, token, "")
		require.Equal(t, http.StatusOK, status, path+": "+body)
	}
	status, body := b.do(t, "GET", "/", "", "")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, "login-form", "the dashboard asks for the token")
	status, _ = b.do(t, "GET", "/static/dashboard.css", "", "")
	require.Equal(t, http.StatusOK, status, "static files hold no data")

	metricsOnly := setup(t, 1, &httpapi.Options{Token: token, PublicMetrics: true})
	status, _ = metricsOnly.do(t, "GET", "/metrics", "", "")
	require.Equal(t, http.StatusOK, status, "--public-metrics opens /metrics")
	status, _ = metricsOnly.do(t, "GET", "/api/v1/tasks", "", "")
	require.Equal(t, http.StatusUnauthorized, status, "and nothing else")

	public := setup(t, 1, &httpapi.Options{Token: token, PublicReads: true})
	for _, path := range append(reads, "/") {
		status, body := public.do(t, "GET", path, "", "")
		require.NotEqual(t, http.StatusUnauthorized, status, path+": "+body)
	}
	status, _ = public.do(t, "PATCH", "/api/v1/tasks/app/export/overrides", "", `{"enabled": false}`)
	require.Equal(t, http.StatusUnauthorized, status, "changes still need the token")
}

func TestBadInputGets4xxNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.start(t, "export")
	long := strings.Repeat("x", 201)
	for _, tc := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"concurrency_limit": 0}`, 400, "concurrency_limit"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"concurrency_limit": "three"}`, 400, "concurrency_limit"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"limit": 3}`, 400, "limit"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"keep_alive_death_threshold": "soon"}`, 400, "keep_alive_death_threshold"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"keep_alive_interval": "10s", "keep_alive_death_threshold": "15s"}`, 400, "keep_alive_death_threshold"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"override_threshold": "-1s"}`, 400, "override_threshold"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"death_mode": "sometimes"}`, 400, "death_mode"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{}`, 400, "body"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `not json`, 400, "body"},
		{"PATCH", "/api/v1/tasks/" + long + "/export/overrides", `{"enabled": true}`, 400, "app"},
		{"GET", "/api/v1/tasks/app/" + long, "", 400, "task"},
		{"GET", "/api/v1/tasks/app/export/executions?status=running", "", 400, "status"},
		{"GET", "/api/v1/tasks/app/export/executions?limit=0", "", 400, "limit"},
		{"GET", "/api/v1/tasks/app/export/executions?limit=many", "", 400, "limit"},
		{"GET", "/api/v1/tasks/app/export/executions?before=-4", "", 400, "before"},
		{"GET", "/api/v1/executions/abc", "", 400, "id"},
		{"GET", "/api/v1/executions/999999", "", 404, ""},
		{"GET", "/api/v1/tasks/app/nope", "", 404, ""},
		{"GET", "/api/v1/tasks/app/nope/executions", "", 404, ""},
		{"DELETE", "/api/v1/tasks/app/nope/overrides", "", 404, ""},
		{"GET", "/api/v1/nothing", "", 404, ""},
		{"POST", "/api/v1/tasks/app/export/overrides", `{"enabled": true}`, 405, "method"},
		{"DELETE", "/api/v1/tasks", "", 405, "method"},
	} {
		status, body := b.do(t, tc.method, tc.path, token, tc.body)
		require.Equal(t, tc.status, status, "%s %s %s: %s", tc.method, tc.path, tc.body, body)
		field, _ := apiErr(t, body)
		require.Equal(t, tc.field, field, "%s %s %s: %s", tc.method, tc.path, tc.body, body)
		require.NotContains(t, body, "goroutine", "no stack traces")
	}
}

func TestLimitChangedThroughTheAPIIsObeyedByTheNextStart(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	const path = "/api/v1/tasks/app/export/overrides"
	b.start(t, "export")
	_, err := b.client.StartExecution(b.ctx, "app", "export", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)

	status, body := b.do(t, "PATCH", path, token, `{"concurrency_limit": 2}`)
	require.Equal(t, http.StatusOK, status, body)
	b.start(t, "export")

	status, body = b.do(t, "PATCH", path, token, `{"enabled": false}`)
	require.Equal(t, http.StatusOK, status, body)
	_, err = b.client.StartExecution(b.ctx, "app", "export", nil)
	require.ErrorIs(t, err, taskling.ErrTaskDisabled)

	status, body = b.do(t, "DELETE", path, token, "")
	require.Equal(t, http.StatusOK, status, body)
	_, err = b.client.StartExecution(b.ctx, "app", "export", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached, "back to the declared limit 1, with two live holders")

	var task httpapi.Task
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Equal(t, 1, task.Limit)
	require.Equal(t, 2, task.SlotsUsed, "a lowered limit never evicts a live holder")
	require.Equal(t, 1, task.SlotsRetiring)
}

func TestSlotsShowDeadHoldersAndUnlimitedTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	// In Override mode a holder sends no heartbeat: it is dead once its threshold passes.
	pool := b.pool
	silent, err := taskling.NewClient(pool, &taskling.Config{HostName: "silent-host", Defaults: taskling.TaskSettings{
		DeathMode: taskling.DeathModeOverride, OverrideThreshold: 300 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(silent.Close)
	frozen, err := silent.StartExecution(b.ctx, "app", "export", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = frozen.Complete(context.Background()) })

	var detail httpapi.TaskDetail
	require.Eventually(t, func() bool {
		b.getJSON(t, "/api/v1/tasks/app/export", &detail)
		// The summary and the slots are two reads: near the threshold they may disagree once.
		return !detail.Slots[0].Holder.Alive && detail.SlotsUsed == 0
	}, 5*time.Second, 50*time.Millisecond, "a holder past its threshold is shown dead, and its slot free")
	require.Equal(t, frozen.ID(), detail.Slots[0].Holder.ExecutionID)
	require.Greater(t, detail.Slots[0].Holder.HeartbeatAgeSeconds, 0.3)
	require.Equal(t, "silent-host", detail.Slots[0].Holder.Host)
	var x httpapi.Execution
	b.getJSON(t, "/api/v1/executions/"+itoa(frozen.ID()), &x)
	require.Equal(t, "dead", x.Status)

	unlimited := -1
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, "app", "fanout", taskling.SettingsUpdate{ConcurrencyLimit: &unlimited}))
	b.start(t, "fanout")
	b.start(t, "fanout")
	b.getJSON(t, "/api/v1/tasks/app/fanout", &detail)
	require.Equal(t, -1, detail.SlotsTotal)
	require.Equal(t, 2, detail.SlotsUsed)
	require.Len(t, detail.Slots, 2)
	for _, s := range detail.Slots {
		require.Equal(t, "unlimited", s.Status)
		require.True(t, s.Holder.Alive)
	}
}

// TestPercentNeverOverflows is issue 15 item 6: done*100 overflowed int64 for huge counts.
func TestPercentNeverOverflows(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		want        int
	}{
		{0, 0, 0}, {5, 0, 0}, {40, 100, 40}, {1, 3, 33}, {100, 100, 100}, {150, 100, 100},
		{math.MaxInt64 / 2, math.MaxInt64, 50}, {math.MaxInt64 - 1, math.MaxInt64, 99}, {math.MaxInt64, math.MaxInt64, 100},
		{4e17, 8e17, 50},
	} {
		require.Equal(t, tc.want, httpapi.Percent(tc.done, tc.total), "%d/%d", tc.done, tc.total)
	}
}

// The task views show the queue of waiters: how many, and since when the oldest waits.
func TestTaskShowsItsWaiters(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	b.start(t, "export")
	var task httpapi.Task
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Zero(t, task.Waiting)
	require.Nil(t, task.OldestWaitSince)

	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.client.StartExecution(ctx, "app", "export", &taskling.StartOptions{WaitForSlot: true})
		done <- err
	}()
	require.Eventually(t, func() bool {
		b.getJSON(t, "/api/v1/tasks/app/export", &task)
		return task.Waiting == 1
	}, 5*time.Second, 20*time.Millisecond)
	require.NotNil(t, task.OldestWaitSince)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

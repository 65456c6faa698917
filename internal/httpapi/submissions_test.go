package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// setupWork is setup for tests that run submissions with Work: a limit of 1, and a death
// threshold long enough that a loaded machine's late heartbeat never loses a lease mid-test.
func setupWork(t *testing.T, opts *httpapi.Options) *testBundle {
	t.Helper()
	return setupWith(t, taskling.TaskSettings{ConcurrencyLimit: 1, KeepAliveInterval: 200 * time.Millisecond, KeepAliveDeathThreshold: 20 * time.Second}, opts)
}

// submit posts body to the task's submissions and returns the new id.
func (b *testBundle) submit(t *testing.T, task, body string) int64 {
	t.Helper()
	status, out := b.do(t, "POST", "/api/v1/tasks/app/"+task+"/submissions", token, body)
	require.Equal(t, http.StatusCreated, status, out)
	var r httpapi.SubmitResponse
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.Positive(t, r.ID)
	return r.ID
}

func (b *testBundle) submission(t *testing.T, id int64) httpapi.SubmissionDetail {
	t.Helper()
	var s httpapi.SubmissionDetail
	b.getJSON(t, "/api/v1/submissions/"+itoa(id), &s)
	return s
}

func (b *testBundle) waitSubmission(t *testing.T, id int64, want taskling.SubmissionStatus) httpapi.SubmissionDetail {
	t.Helper()
	var s httpapi.SubmissionDetail
	require.Eventually(t, func() bool {
		s = b.submission(t, id)
		return s.Status == want
	}, 15*time.Second, 20*time.Millisecond, "submission %d to become %s", id, want)
	return s
}

// work runs Work for app/task until the test ends.
func (b *testBundle) work(t *testing.T, task string, fn func(context.Context, *taskling.Execution) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.client.Work(ctx, "app", task, fn, &taskling.WorkOptions{DrainTimeout: 5 * time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func TestSubmitListShowAndCancelThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)

	// Submitting creates the task; the answer is the id and where to read it.
	req, err := http.NewRequestWithContext(b.ctx, "POST", b.server.URL+"/api/v1/tasks/app/export/submissions",
		strings.NewReader(`{"header": {"day": "2026-11-21", "rows": [1, 2]}, "reference_value": "day-21", "priority": 5, "max_attempts": 2}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.server.Client().Do(req)
	require.NoError(t, err)
	body := readBody(t, resp)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	var created httpapi.SubmitResponse
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	first := created.ID
	require.Equal(t, "/api/v1/submissions/"+itoa(first), resp.Header.Get("Location"))

	require.Equal(t, first, b.submit(t, "export", `{"reference_value": "day-21", "priority": 9}`), "a duplicate reference returns the first id")
	// No body at all (and so no Content-Type): every default.
	status, body := b.do(t, "POST", "/api/v1/tasks/app/export/submissions", token, "")
	require.Equal(t, http.StatusCreated, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	plain := created.ID
	urgent := b.submit(t, "export", `{"priority": 10, "header": null}`)

	s := b.submission(t, first)
	require.Equal(t, taskling.SubmissionWaiting, s.Status)
	require.Equal(t, "app", s.Application)
	require.Equal(t, "export", s.Task)
	require.Equal(t, 2, s.Position, "behind the priority-10 one")
	require.Equal(t, 5, s.Priority)
	require.Equal(t, 2, s.MaxAttempts)
	require.Equal(t, "day-21", s.ReferenceValue)
	require.JSONEq(t, `{"day": "2026-11-21", "rows": [1, 2]}`, string(s.Header))
	require.Zero(t, s.Attempts)
	require.Empty(t, s.AttemptsExecutions)
	_, raw := b.do(t, "GET", "/api/v1/submissions/"+itoa(first), "", "")
	require.Contains(t, raw, `"attempts_executions": []`, "the attempts are a list even before the first")
	d := b.submission(t, plain)
	require.Equal(t, taskling.DefaultMaxAttempts, d.MaxAttempts)
	require.Equal(t, 3, d.Position)
	require.Empty(t, d.Header)
	require.Empty(t, b.submission(t, urgent).Header, "a null header is no header")

	// The waiting ones come in queue order; the others newest first, in pages.
	var page httpapi.SubmissionPage
	b.getJSON(t, "/api/v1/tasks/app/export/submissions?status=waiting", &page)
	require.Equal(t, []int64{urgent, first, plain}, ids(page.Submissions))
	require.Equal(t, []int{1, 2, 3}, []int{page.Submissions[0].Position, page.Submissions[1].Position, page.Submissions[2].Position})
	require.Nil(t, page.NextBefore)
	b.getJSON(t, "/api/v1/tasks/app/export/submissions?limit=2", &page)
	require.Equal(t, []int64{urgent, plain}, ids(page.Submissions))
	require.NotNil(t, page.NextBefore)
	b.getJSON(t, "/api/v1/tasks/app/export/submissions?limit=2&before="+itoa(*page.NextBefore), &page)
	require.Equal(t, []int64{first}, ids(page.Submissions))
	require.Nil(t, page.NextBefore)
	b.getJSON(t, "/api/v1/tasks/app/never/submissions", &page)
	require.NotNil(t, page.Submissions)
	require.Empty(t, page.Submissions, "a task never submitted to has none")

	// Cancelling needs the token; a waiting submission is cancelled at once.
	for _, auth := range []string{"", "wrong"} {
		status, body := b.do(t, "POST", "/api/v1/submissions/"+itoa(plain)+"/cancel", auth, `{"reason": "x"}`)
		require.Equal(t, http.StatusUnauthorized, status, body)
	}
	require.Equal(t, taskling.SubmissionWaiting, b.submission(t, plain).Status, "a refused cancel changed nothing")
	status, body = b.do(t, "POST", "/api/v1/submissions/"+itoa(plain)+"/cancel", token, `{"reason": "wrong day"}`)
	require.Equal(t, http.StatusOK, status, body)
	var cancelled httpapi.SubmissionDetail
	require.NoError(t, json.Unmarshal([]byte(body), &cancelled))
	require.Equal(t, taskling.SubmissionCancelled, cancelled.Status)
	require.Equal(t, "wrong day", cancelled.CancelReason)
	require.NotNil(t, cancelled.FinishedAt)
	require.Zero(t, cancelled.Position)
	require.Equal(t, 2, b.submission(t, first).Position, "the queue closed up behind it")

	status, body = b.do(t, "POST", "/api/v1/submissions/"+itoa(plain)+"/cancel", token, "")
	require.Equal(t, http.StatusConflict, status, body)
	_, msg := apiErr(t, body)
	require.Contains(t, msg, "already finished")
	status, body = b.do(t, "POST", "/api/v1/submissions/999999/cancel", token, "")
	require.Equal(t, http.StatusNotFound, status, body)
	status, body = b.do(t, "GET", "/api/v1/submissions/999999", "", "")
	require.Equal(t, http.StatusNotFound, status, body)

	// A worker runs the others, and never the cancelled one.
	ran := make(chan int64, 4)
	b.work(t, "export", func(_ context.Context, e *taskling.Execution) error {
		ran <- e.SubmissionID()
		return nil
	})
	b.waitSubmission(t, first, taskling.SubmissionCompleted)
	b.waitSubmission(t, urgent, taskling.SubmissionCompleted)
	require.ElementsMatch(t, []int64{urgent, first}, []int64{<-ran, <-ran})
	require.Equal(t, taskling.SubmissionCancelled, b.submission(t, plain).Status)
	b.getJSON(t, "/api/v1/tasks/app/export/submissions?status=completed", &page)
	require.ElementsMatch(t, []int64{urgent, first}, ids(page.Submissions))
}

func ids(subs []taskling.Submission) []int64 {
	out := make([]int64, len(subs))
	for i, s := range subs {
		out[i] = s.ID
	}
	return out
}

func TestRunningSubmissionShowsProgressAttemptsAndCanBeCancelled(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	release := make(chan struct{})
	causes := make(chan error, 1)
	b.work(t, "export", func(ctx context.Context, e *taskling.Execution) error {
		if err := e.SetProgress(ctx, 3, 4); err != nil {
			return err
		}
		var h struct{ Stop bool }
		if err := e.Header(&h); err != nil {
			return err
		}
		if h.Stop {
			<-ctx.Done() // runs until cancelled
			causes <- context.Cause(ctx)
			return context.Cause(ctx)
		}
		select {
		case <-release:
			return e.SetProgress(ctx, 4, 4)
		case <-ctx.Done():
			return ctx.Err()
		}
	})

	id := b.submit(t, "export", `{"reference_value": "r1"}`)
	var s httpapi.SubmissionDetail
	require.Eventually(t, func() bool {
		s = b.submission(t, id)
		return s.Status == taskling.SubmissionInProgress && s.ItemsTotal == 4
	}, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(3), s.ItemsDone)
	require.Equal(t, 1, s.Attempts)
	require.Zero(t, s.Position)
	require.Positive(t, s.ExecutionID)
	require.Equal(t, []int64{s.ExecutionID}, s.AttemptsExecutions)
	var x httpapi.Execution
	b.getJSON(t, "/api/v1/executions/"+itoa(s.ExecutionID), &x)
	require.Equal(t, "in_progress", x.Status)
	require.Equal(t, "r1", *x.ReferenceValue, "the attempt runs with the submission's reference")

	close(release)
	s = b.waitSubmission(t, id, taskling.SubmissionCompleted)
	require.Equal(t, int64(4), s.ItemsDone)
	require.NotNil(t, s.FinishedAt)
	require.Len(t, s.AttemptsExecutions, 1)

	// A running submission: the cancel is asked at once, and its run's context is cancelled.
	stuck := b.submit(t, "export", `{"header": {"Stop": true}}`)
	b.waitSubmission(t, stuck, taskling.SubmissionInProgress)
	status, body := b.do(t, "POST", "/api/v1/submissions/"+itoa(stuck)+"/cancel", token, `{"reason": "operator"}`)
	require.Equal(t, http.StatusOK, status, body)
	var asked httpapi.SubmissionDetail
	require.NoError(t, json.Unmarshal([]byte(body), &asked))
	require.True(t, asked.CancelRequested)
	require.Equal(t, "operator", asked.CancelReason)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, taskling.ErrSubmissionCancelled)
	case <-time.After(15 * time.Second):
		t.Fatal("the running attempt's context was not cancelled")
	}
	b.waitSubmission(t, stuck, taskling.SubmissionCancelled)
}

func TestSubmissionBadInputNamesTheField(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	id := b.submit(t, "export", "")
	const subs = "/api/v1/tasks/app/export/submissions"
	cancel := "/api/v1/submissions/" + itoa(id) + "/cancel"
	long := strings.Repeat("x", 201)
	for _, tc := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"POST", subs, `{"priority": "high"}`, 400, "priority"},
		{"POST", subs, `{"priority": 4294967296}`, 400, "priority"},
		{"POST", subs, `{"priority": 1.5}`, 400, "priority"},
		{"POST", subs, `{"max_attempts": 0}`, 400, "max_attempts"},
		{"POST", subs, `{"max_attempts": 1001}`, 400, "max_attempts"},
		{"POST", subs, `{"reference_value": 7}`, 400, "reference_value"},
		{"POST", subs, `{"reference_value": "` + strings.Repeat("r", taskling.MaxReferenceValueLength+1) + `"}`, 400, "reference_value"},
		{"POST", subs, `{"reference_value": "a\u0000b"}`, 400, "reference_value"},
		{"POST", subs, `{"header": "` + strings.Repeat("h", taskling.MaxHeaderLength) + `"}`, 400, "header"},
		{"POST", subs, `{"header": ` + strings.Repeat(" ", 200<<10) + `1}`, 413, "body"},
		// What jsonb cannot store (issue 22: a 500).
		{"POST", subs, `{"header": {"a": "x\u0000"}}`, 400, "header"},
		{"POST", subs, `{"header": ["\ud800"]}`, 400, "header"},
		{"POST", subs, `{"header": "\udc00\ud800"}`, 400, "header"},
		{"POST", subs, `{"header": {"n": 1e999999}}`, 400, "header"},
		{"POST", subs, `{"header": 1e-99999}`, 400, "header"},
		{"POST", subs, `{"priorty": 1}`, 400, "priorty"},
		{"POST", subs, `{"priority": 1} {}`, 400, "body"},
		{"POST", subs, `[1]`, 400, "body"},
		{"POST", "/api/v1/tasks/" + long + "/export/submissions", `{}`, 400, "app"},
		{"GET", subs + "?status=running", "", 400, "status"},
		{"GET", subs + "?limit=0", "", 400, "limit"},
		{"GET", subs + "?limit=1001", "", 400, "limit"},
		{"GET", subs + "?before=-1", "", 400, "before"},
		{"GET", "/api/v1/tasks/app/" + long + "/submissions", "", 400, "task"},
		{"GET", "/api/v1/submissions/abc", "", 400, "id"},
		{"GET", "/api/v1/submissions/0", "", 400, "id"},
		{"GET", "/api/v1/submissions/999999", "", 404, ""},
		{"POST", "/api/v1/submissions/abc/cancel", "", 400, "id"},
		{"POST", cancel, `{"reason": "` + strings.Repeat("r", taskling.MaxCancelReasonLength+1) + `"}`, 400, "reason"},
		{"POST", cancel, `{"why": "x"}`, 400, "why"},
		{"DELETE", subs, "", 405, "method"},
		{"PUT", "/api/v1/submissions/1", `{}`, 405, "method"},
		{"GET", cancel, "", 405, "method"},
	} {
		status, body := b.do(t, tc.method, tc.path, token, tc.body)
		require.Equal(t, tc.status, status, "%s %s %.80s: %s", tc.method, tc.path, tc.body, body)
		field, _ := apiErr(t, body)
		require.Equal(t, tc.field, field, "%s %s %.80s: %s", tc.method, tc.path, tc.body, body)
	}

	req, err := http.NewRequestWithContext(b.ctx, "POST", b.server.URL+subs, strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := b.server.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, readBody(t, resp))

	status, body := b.do(t, "POST", subs, "", `{}`)
	require.Equal(t, http.StatusUnauthorized, status, body)
	readOnly := setup(t, 1, &httpapi.Options{})
	status, body = readOnly.do(t, "POST", subs, "", `{}`)
	require.Equal(t, http.StatusForbidden, status, body)

	var page httpapi.SubmissionPage
	b.getJSON(t, subs, &page)
	require.Equal(t, []int64{id}, ids(page.Submissions), "no refused request stored a submission")
	s := b.submission(t, id)
	require.Equal(t, taskling.SubmissionWaiting, s.Status, "no refused request cancelled it")
	require.False(t, s.CancelRequested)
}

// A browser's session may cancel only with the header the dashboard's script sends, as for any
// other change: a cross-site form cannot cancel a submission.
func TestCancelFromABrowserSessionNeedsTheDashboardHeader(t *testing.T) {
	t.Parallel()
	srv, client := mounted(t)
	id, err := client.Submit(t.Context(), "app", "export", nil)
	require.NoError(t, err)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(srv.URL+"/taskling/login", url.Values{"token": {token}})
	require.NoError(t, err)
	readBody(t, resp)

	cancel := func(header bool) int {
		req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/taskling/api/v1/submissions/"+itoa(id)+"/cancel", nil)
		require.NoError(t, err)
		if header {
			req.Header.Set("X-Taskling-Request", "1")
		}
		resp, err := browser.Do(req)
		require.NoError(t, err)
		readBody(t, resp)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, cancel(false))
	s, err := client.Submission(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionWaiting, s.Status)
	require.Equal(t, http.StatusOK, cancel(true))
	s, err = client.Submission(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCancelled, s.Status)
}

func TestTaskPageShowsTheSubmissionsQueueAndCancelButtons(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	release := make(chan struct{})
	b.work(t, "export", func(ctx context.Context, e *taskling.Execution) error {
		var h struct{ Fail bool }
		if err := e.Header(&h); err != nil || h.Fail {
			return errors.New("disk full")
		}
		if err := e.SetProgress(ctx, 30, 120); err != nil {
			return err
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	t.Cleanup(func() { close(release) }) // before Work's own cleanup, which waits for the run
	dead := b.submit(t, "export", `{"max_attempts": 1, "reference_value": "bad-day", "header": {"Fail": true}}`)
	b.waitSubmission(t, dead, taskling.SubmissionDead)
	running := b.submit(t, "export", "")
	require.Eventually(t, func() bool { return b.submission(t, running).ItemsTotal == 120 }, 15*time.Second, 20*time.Millisecond)
	next := b.submit(t, "export", `{"reference_value": "day-22"}`)
	after := b.submit(t, "export", "")

	// The bearer token signs the page in, so it offers to cancel what has not finished.
	status, page := b.do(t, "GET", "/tasks/app/export", token, "")
	require.Equal(t, http.StatusOK, status, page)
	row := func(id int64) string {
		t.Helper()
		start := strings.Index(page, `<tr id="submission-`+itoa(id)+`">`)
		require.GreaterOrEqual(t, start, 0, "row of submission %d in %s", id, page)
		end := strings.Index(page[start:], "</tr>")
		return page[start : start+end]
	}
	require.Contains(t, row(running), `<span class="status in_progress">in_progress</span>`)
	require.Contains(t, row(running), `id="submission-progress-`+itoa(running)+`" value="30" max="120"`)
	require.Contains(t, row(running), "30/120 25%")
	require.Contains(t, row(running), `data-cancel-api="../../api/v1/submissions/`+itoa(running)+`/cancel"`)
	require.Contains(t, row(next), `<span class="status waiting">waiting</span>`)
	require.Contains(t, row(next), `<td class="position">1</td>`)
	require.Contains(t, row(next), "day-22")
	require.Contains(t, row(after), `<td class="position">2</td>`)
	require.Contains(t, row(after), `id="cancel-`+itoa(after)+`"`)
	require.Contains(t, row(dead), `<span class="status dead">dead</span>`)
	require.Contains(t, row(dead), "disk full")
	require.NotContains(t, row(dead), "data-cancel-api", "a finished submission cannot be cancelled")
	require.Contains(t, row(next), `href="../../submissions/`+itoa(next)+`"`)
	require.Less(t, strings.Index(page, row(running)), strings.Index(page, row(next)), "running first, then the queue, then the finished")
	require.Less(t, strings.Index(page, row(after)), strings.Index(page, row(dead)))

	// Public reads without a session: the queue shows, the buttons do not.
	status, page = b.do(t, "GET", "/tasks/app/export", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="submission-`+itoa(next)+`"`)
	require.NotContains(t, page, "data-cancel-api")

	// The submission page.
	status, page = b.do(t, "GET", "/submissions/"+itoa(next), token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, `<dd id="submission-status"><span class="status waiting">waiting</span>`)
	require.Contains(t, page, `<dd id="submission-position">1 in the queue</dd>`)
	require.Contains(t, page, `href="../static/dashboard.css"`)
	require.Contains(t, page, `href="../tasks/app/export"`)
	require.Contains(t, page, `id="cancel-`+itoa(next)+`"`)
	status, page = b.do(t, "GET", "/submissions/"+itoa(dead), token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, `<dd class="reason" id="submission-error">disk full</dd>`)
	require.Contains(t, page, `<a class="execution" href="../executions/`)
	require.NotContains(t, page, "data-cancel-api")
	status, _ = b.do(t, "GET", "/submissions/999999", token, "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.do(t, "GET", "/submissions/abc", token, "")
	require.Equal(t, http.StatusBadRequest, status)

	// Without a token the server is read-only: no buttons there either.
	readOnly, err := httpapi.New(b.client, &httpapi.Options{})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	readOnly.ServeHTTP(rec, httptest.NewRequestWithContext(b.ctx, "GET", "/tasks/app/export", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `id="submission-`+itoa(after)+`"`)
	require.NotContains(t, rec.Body.String(), "data-cancel-api")
}

// TestSubmitStoresTheRequestsTraceContext: the submit route stores the request's traceparent and
// tracestate headers with the submission, which its JSON shows under "trace"; a malformed
// traceparent is ignored, as W3C Trace Context asks, and the submission is made without one.
func TestSubmitStoresTheRequestsTraceContext(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	submit := func(headers map[string]string) int64 {
		req, err := http.NewRequestWithContext(b.ctx, "POST", b.server.URL+"/api/v1/tasks/app/export/submissions", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := b.server.Client().Do(req)
		require.NoError(t, err)
		body := readBody(t, resp)
		require.Equal(t, http.StatusCreated, resp.StatusCode, body)
		var created httpapi.SubmitResponse
		require.NoError(t, json.Unmarshal([]byte(body), &created))
		return created.ID
	}
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := submit(map[string]string{"traceparent": parent, "tracestate": "rojo=00f067aa0ba902b7"})
	s := b.submission(t, traced)
	require.Equal(t, taskling.TraceContext{Traceparent: parent, Tracestate: "rojo=00f067aa0ba902b7"}, s.Trace)
	_, raw := b.do(t, "GET", "/api/v1/submissions/"+itoa(traced), "", "")
	var view struct {
		Trace map[string]string `json:"trace"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &view))
	require.Equal(t, map[string]string{"traceparent": parent, "tracestate": "rojo=00f067aa0ba902b7"}, view.Trace)

	malformed := submit(map[string]string{"traceparent": "00-not-a-trace-01"})
	require.True(t, b.submission(t, malformed).Trace.IsZero())
	_, raw = b.do(t, "GET", "/api/v1/submissions/"+itoa(malformed), "", "")
	require.NotContains(t, raw, `"trace"`, "no trace context: no trace key")
}

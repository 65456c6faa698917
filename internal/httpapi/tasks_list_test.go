package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// taskList is the answer of GET /api/v1/tasks.
type taskList struct {
	Tasks []struct {
		Application string `json:"application"`
		Task        string `json:"task"`
		SlotsUsed   int    `json:"slots_used"`
		Waiting     int    `json:"waiting"`
	} `json:"tasks"`
	NextCursor *string `json:"next_cursor"`
	Total      int     `json:"total"`
}

func (l taskList) names() []string {
	out := make([]string, len(l.Tasks))
	for i, t := range l.Tasks {
		out[i] = t.Application + "/" + t.Task
	}
	return out
}

// createTask creates a task's row without running it (an override creates it).
func (b *testBundle) createTask(t *testing.T, app, task string) {
	t.Helper()
	n := 3
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, app, task, taskling.SettingsUpdate{ConcurrencyLimit: &n}))
}

// busyTasks sets up app/full (both slots held, one start waiting), app/half (one of two slots
// held) and other/xyz00 … other/xyz11, idle.
func busyTasks(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t, 2, nil)
	b.start(t, "full")
	b.start(t, "full")
	b.start(t, "half")
	for i := range 12 {
		b.createTask(t, "other", fmt.Sprintf("xyz%02d", i))
	}
	waitCtx, stopWaiting := context.WithCancel(b.ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if e, err := b.client.StartExecution(waitCtx, "app", "full", &taskling.StartOptions{WaitForSlot: true}); err == nil {
			_ = e.Complete(context.Background())
		}
	}()
	t.Cleanup(func() { stopWaiting(); <-waited })
	require.Eventually(t, func() bool {
		d, err := b.client.Task(b.ctx, "app", "full")
		return err == nil && d.Waiting == 1
	}, 10*time.Second, 20*time.Millisecond, "the waiter is queued")
	return b
}

func TestListTasksFiltersAndSortsInTheDatabase(t *testing.T) {
	t.Parallel()
	b := busyTasks(t)
	list := func(query string) taskList {
		t.Helper()
		var l taskList
		b.getJSON(t, "/api/v1/tasks?"+query, &l)
		return l
	}
	xyz := make([]string, 12)
	for i := range xyz {
		xyz[i] = fmt.Sprintf("other/xyz%02d", i)
	}

	all := list("")
	require.Equal(t, append([]string{"app/full", "app/half"}, xyz...), all.names(), "by application, then name")
	require.Equal(t, 14, all.Total)
	require.Nil(t, all.NextCursor, "one page")

	for query, want := range map[string][]string{
		"q=XYZ1":                       {"other/xyz10", "other/xyz11"},
		"q=" + url.QueryEscape("p/fu"): {"app/full"},
		"app=app":                      {"app/full", "app/half"},
		"status=busy":                  {"app/full", "app/half"},
		"status=at_limit":              {"app/full"},
		"status=waiting":               {"app/full"},
		"status=idle":                  xyz,
		"app=other&q=xyz0":             xyz[:10],
		"q=nothing":                    {},
	} {
		l := list(query)
		require.Equal(t, want, l.names(), query)
		require.Equal(t, len(want), l.Total, query)
	}

	busy := list("sort=busy&limit=3")
	require.Equal(t, []string{"app/full", "app/half", "other/xyz00"}, busy.names(), "at the limit first, then the most used, then by name")
	require.Equal(t, 14, busy.Total)
	require.NotNil(t, busy.NextCursor)
	next := list("sort=busy&limit=3&cursor=" + url.QueryEscape(*busy.NextCursor))
	require.Equal(t, []string{"other/xyz01", "other/xyz02", "other/xyz03"}, next.names())
}

func TestListTasksPagesStayStableWhenTasksAreCreated(t *testing.T) {
	t.Parallel()
	b := busyTasks(t)
	var first taskList
	b.getJSON(t, "/api/v1/tasks?app=other&limit=5", &first)
	require.Equal(t, []string{"other/xyz00", "other/xyz01", "other/xyz02", "other/xyz03", "other/xyz04"}, first.names())
	require.Equal(t, 12, first.Total)
	require.NotNil(t, first.NextCursor)

	// Tasks created before the cursor and after it: the next page neither repeats nor skips.
	b.createTask(t, "other", "aaa")
	b.createTask(t, "other", "xyz07b")
	var second taskList
	b.getJSON(t, "/api/v1/tasks?app=other&limit=5&cursor="+url.QueryEscape(*first.NextCursor), &second)
	require.Equal(t, []string{"other/xyz05", "other/xyz06", "other/xyz07", "other/xyz07b", "other/xyz08"}, second.names())
	require.Equal(t, 14, second.Total, "the total counts the new tasks")
	var third taskList
	b.getJSON(t, "/api/v1/tasks?app=other&limit=5&cursor="+url.QueryEscape(*second.NextCursor), &third)
	require.Equal(t, []string{"other/xyz09", "other/xyz10", "other/xyz11"}, third.names())
	require.Nil(t, third.NextCursor, "the last page")

	// The cursor of a busy-sorted walk likewise.
	var busy taskList
	b.getJSON(t, "/api/v1/tasks?sort=busy&limit=2", &busy)
	require.Equal(t, []string{"app/full", "app/half"}, busy.names())
	b.createTask(t, "aaa", "first")
	var after taskList
	b.getJSON(t, "/api/v1/tasks?sort=busy&limit=2&cursor="+url.QueryEscape(*busy.NextCursor), &after)
	require.Equal(t, []string{"aaa/first", "other/aaa"}, after.names(), "idle tasks by name after the busy ones")
}

func TestListTasksRejectsBadParameters(t *testing.T) {
	t.Parallel()
	b := busyTasks(t)
	var page taskList
	b.getJSON(t, "/api/v1/tasks?limit=1", &page)
	require.NotNil(t, page.NextCursor)
	for query, field := range map[string]string{
		"status=running":                "status",
		"sort=oldest":                   "sort",
		"limit=0":                       "limit",
		"limit=501":                     "limit",
		"limit=ten":                     "limit",
		"cursor=bogus":                  "cursor",
		"cursor=e30":                    "cursor", // "{}"
		"app=a%01b":                     "app",
		"q=" + strings.Repeat("x", 201): "q",
		// A cursor of one sort order used with another.
		"sort=busy&cursor=" + url.QueryEscape(*page.NextCursor): "cursor",
	} {
		status, body := b.do(t, "GET", "/api/v1/tasks?"+query, "", "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", query, body)
		got, msg := apiErr(t, body)
		require.Equal(t, field, got, "%s: %s", query, msg)
	}
	var max taskList
	b.getJSON(t, "/api/v1/tasks?limit=500", &max)
	require.Len(t, max.Tasks, 14)
}

func TestDashboardFiltersAndPagesTheTasks(t *testing.T) {
	t.Parallel()
	b := busyTasks(t)
	status, body := b.do(t, "GET", "/?app=other&limit=5", "", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<option value="other" selected>other</option>`)
	require.Contains(t, body, `<tr class="group"><th colspan="4">other</th></tr>`, "grouped by application")
	require.Contains(t, body, "other/xyz04")
	require.NotContains(t, body, "other/xyz05")
	require.Contains(t, body, "12 tasks match")
	require.NotContains(t, body, `id="prev-page"`)
	i := strings.Index(body, `id="next-page" href="`)
	require.Positive(t, i, "a next page link")
	href := body[i+len(`id="next-page" href="`):]
	href = strings.ReplaceAll(href[:strings.Index(href, `"`)], "&amp;", "&")

	// The next page, as the auto-refresh reads it: the content only.
	req, err := http.NewRequestWithContext(b.ctx, "GET", b.server.URL+"/"+href, nil)
	require.NoError(t, err)
	req.Header.Set("X-Taskling-Partial", "1")
	resp, err := b.server.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	part := string(raw)
	require.NotContains(t, part, "<html")
	require.Contains(t, part, "other/xyz05")
	require.Contains(t, part, "other/xyz09")
	require.NotContains(t, part, "other/xyz04")
	require.Contains(t, part, `id="prev-page"`)

	// Busiest first: no groups.
	_, body = b.do(t, "GET", "/?sort=busy&status=busy", "", "")
	require.NotContains(t, body, `class="group"`)
	require.Less(t, strings.Index(body, "app/full"), strings.Index(body, "app/half"))
	require.NotContains(t, body, "other/xyz")

	status, body = b.do(t, "GET", "/?status=nope", "", "")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "status")
	_, body = b.do(t, "GET", "/?q=matches-nothing", "", "")
	require.Contains(t, body, "No task matches.")
}

package httpapi_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// blockHistory runs one execution of app/import over the numbers 1 to 30 in blocks of 10: the
// first completes, the second fails, and the third is left unfinished when the execution ends,
// so it is dead. Both of those had their one attempt: they are at their retry limit.
func blockHistory(t *testing.T, b *testBundle) (x *taskling.Execution, done, failed, dead *taskling.Block) {
	t.Helper()
	x, err := b.client.StartExecution(b.ctx, "app", "import", &taskling.StartOptions{ReferenceValue: "batch-7", Header: map[string]string{"source": "s3://in"}})
	require.NoError(t, err)
	blocks, err := x.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 30, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.NoError(t, x.SetProgress(b.ctx, 10, 30))
	require.NoError(t, blocks[0].Complete(b.ctx, 10))
	require.NoError(t, blocks[1].Fail(b.ctx, `bad <file> & "quotes"`))
	require.NoError(t, blocks[2].Start(b.ctx))
	require.NoError(t, x.Checkpoint(b.ctx, "two of three"))
	require.NoError(t, x.Complete(b.ctx))
	return x, blocks[0], blocks[1], blocks[2]
}

// rowOf is the table row with the given id attribute in page.
func rowOf(t *testing.T, page, id string) string {
	t.Helper()
	start := strings.Index(page, `<tr id="`+id+`">`)
	require.GreaterOrEqual(t, start, 0, "row %s in %s", id, page)
	end := strings.Index(page[start:], "</tr>")
	return page[start : start+end]
}

func TestTaskPageListsBlocksAtTheirRetryLimitWithForceButtons(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	x, done, failed, dead := blockHistory(t, b)
	id := func(blk *taskling.Block) string { return itoa(blk.ID) }

	status, page := b.do(t, "GET", "/tasks/app/import", token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "<h2>Blocks at their retry limit</h2>")
	counts := rowOfElement(t, page, `<p class="note" id="block-counts">`, "</p>")
	require.Contains(t, counts, "all 3")
	require.Contains(t, counts, `<span class="status completed">1 completed</span>`)
	require.Contains(t, counts, `<span class="status failed">1 failed</span>`)
	require.Contains(t, counts, `<span class="status dead">1 dead</span>`)
	require.NotContains(t, page, `<tr id="block-`+id(done)+`">`, "a completed block is not at its retry limit")
	f := rowOf(t, page, "block-"+id(failed))
	require.Contains(t, f, `<a class="block" href="../../blocks/`+id(failed)+`">#`+id(failed)+`</a>`)
	require.Contains(t, f, "<td>numeric</td>")
	require.Contains(t, f, "11–20")
	require.Contains(t, f, `<span class="status failed">failed</span>`)
	require.Contains(t, f, "1 (limit 0)")
	require.Contains(t, f, "bad &lt;file&gt; &amp; &#34;quotes&#34;", "the message is escaped")
	require.NotContains(t, f, "<file>")
	require.Contains(t, f, `data-force-api="../../api/v1/blocks/`+id(failed)+`/force"`)
	d := rowOf(t, page, "block-"+id(dead))
	require.Contains(t, d, `<span class="status dead">dead</span>`)
	require.Contains(t, d, "21–30")
	require.Contains(t, d, `id="force-`+id(dead)+`"`)
	require.Less(t, strings.Index(page, d), strings.Index(page, f), "newest first")
	// The executions link to their pages.
	require.Contains(t, rowOf(t, page, "execution-"+itoa(x.ID())), `href="../../executions/`+itoa(x.ID())+`"`)

	// Public reads without a session: the blocks show, the buttons do not.
	status, page = b.do(t, "GET", "/tasks/app/import", "", "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, `<tr id="block-`+id(failed)+`">`)
	require.NotContains(t, page, "data-force-api")

	// Forcing needs the token; then the row says forced, without its button.
	status, out := b.do(t, "POST", "/api/v1/blocks/"+id(failed)+"/force", "", "")
	require.Equal(t, http.StatusUnauthorized, status, out)
	status, out = b.do(t, "POST", "/api/v1/blocks/"+id(failed)+"/force", token, `{"forced_by": "dashboard"}`)
	require.Equal(t, http.StatusOK, status, out)
	status, page = b.do(t, "GET", "/tasks/app/import", token, "")
	require.Equal(t, http.StatusOK, status, page)
	f = rowOf(t, page, "block-"+id(failed))
	require.Contains(t, f, `<span class="badge forced">forced</span>`)
	require.NotContains(t, f, "data-force-api")
	require.Contains(t, rowOf(t, page, "block-"+id(dead)), "data-force-api", "the other keeps its button")

	// A task without blocks has no such section.
	e := b.start(t, "plain")
	require.NoError(t, e.Complete(b.ctx))
	status, page = b.do(t, "GET", "/tasks/app/plain", token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.NotContains(t, page, "Blocks at their retry limit")
}

// rowOfElement is the part of page from start up to the next end.
func rowOfElement(t *testing.T, page, start, end string) string {
	t.Helper()
	i := strings.Index(page, start)
	require.GreaterOrEqual(t, i, 0, "%s in %s", start, page)
	j := strings.Index(page[i:], end)
	require.GreaterOrEqual(t, j, 0)
	return page[i : i+j]
}

func TestExecutionPageShowsItsProgressEventsAndBlocks(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	x, done, failed, dead := blockHistory(t, b)

	status, page := b.do(t, "GET", "/executions/"+itoa(x.ID()), token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "<h1>Execution #"+itoa(x.ID())+"</h1>")
	require.Contains(t, page, `href="../static/dashboard.css"`)
	require.Contains(t, page, `<a href="../tasks/app/import">app/import</a>`)
	require.Contains(t, page, `<dd id="execution-status"><span class="status completed">completed</span></dd>`)
	require.Contains(t, page, `<dd id="execution-host">test-host</dd>`)
	require.Contains(t, page, `<progress id="execution-progress" value="20" max="30"></progress>`, "10 set, and the completed block's 10")
	require.Contains(t, page, `<dd id="execution-reference">batch-7</dd>`)
	require.Contains(t, page, `<dd class="mono" id="execution-header">{&#34;source&#34;: &#34;s3://in&#34;}</dd>`, "the header, escaped")
	require.NotContains(t, rowOfElement(t, page, `<dd class="time" id="execution-completed">`, "</dd>"), "—")
	events := rowOfElement(t, page, `<table class="events" id="execution-events">`, "</table>")
	for _, want := range []string{"<td>start</td>", "<td>checkpoint</td>", "<td>two of three</td>", "<td>end</td>"} {
		require.Contains(t, events, want)
	}
	blocks := rowOfElement(t, page, `<table class="blocks" id="execution-blocks">`, "</table>")
	for _, blk := range []*taskling.Block{done, failed, dead} {
		require.Contains(t, blocks, `<a class="block" href="../blocks/`+itoa(blk.ID)+`">#`+itoa(blk.ID)+`</a>`)
	}
	require.Contains(t, rowOf(t, blocks, "block-"+itoa(done.ID)), `<span class="status completed">completed</span>`)
	require.Contains(t, rowOf(t, blocks, "block-"+itoa(done.ID)), "1–10")
	require.Contains(t, rowOf(t, blocks, "block-"+itoa(failed.ID)), "bad &lt;file&gt;")
	require.Contains(t, rowOf(t, blocks, "block-"+itoa(failed.ID)), `<span class="badge at-limit">at retry limit</span>`)
	require.Contains(t, rowOf(t, blocks, "block-"+itoa(dead.ID)), `<span class="status dead">dead</span>`)
	require.NotContains(t, page, "data-force-api", "the execution page lists; the block page forces")

	// A running execution: its progress bar, and no blocks yet.
	running := b.start(t, "import")
	require.NoError(t, running.SetProgress(b.ctx, 3, 12))
	status, page = b.do(t, "GET", "/executions/"+itoa(running.ID()), "", "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, `<progress id="execution-progress" value="3" max="12"></progress>`)
	require.Contains(t, page, "3/12 25%")
	require.Contains(t, page, `<span class="status in_progress">in_progress</span>`)
	require.Contains(t, rowOfElement(t, page, `<table class="blocks" id="execution-blocks">`, "</table>"), `<td colspan="6" class="empty">none</td>`)

	status, _ = b.do(t, "GET", "/executions/999999", token, "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.do(t, "GET", "/executions/abc", token, "")
	require.Equal(t, http.StatusBadRequest, status)
}

func TestBlockPageShowsItsAttemptsAndForces(t *testing.T) {
	t.Parallel()
	b := setupWork(t, nil)
	x, done, failed, _ := blockHistory(t, b)
	fid := itoa(failed.ID)

	status, page := b.do(t, "GET", "/blocks/"+fid, token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "<h1>Block #"+fid+"</h1>")
	require.Contains(t, page, `href="../static/dashboard.css"`)
	require.Contains(t, page, `<a href="../tasks/app/import">app/import</a>`)
	require.Contains(t, page, `<dd id="block-kind">numeric</dd>`)
	require.Contains(t, page, `<dd class="mono" id="block-span">11–20</dd>`)
	require.Contains(t, page, `<dd id="block-status"><span class="status failed">failed</span> <span class="badge at-limit">at retry limit</span></dd>`)
	require.Contains(t, page, `<dd id="block-attempts">1 (retry limit 0)</dd>`)
	require.Contains(t, page, `<dd class="reason" id="block-message">bad &lt;file&gt; &amp; &#34;quotes&#34;</dd>`)
	attempt := rowOf(t, page, "attempt-1")
	require.Contains(t, attempt, `<a class="execution" href="../executions/`+itoa(x.ID())+`">#`+itoa(x.ID())+`</a>`)
	require.Contains(t, attempt, `<span class="status failed">failed</span>`)
	require.NotContains(t, attempt, "badge forced")
	require.Contains(t, page, `<button type="button" class="force" id="force-`+fid+`" data-force-api="../api/v1/blocks/`+fid+`/force">`)

	// Without a session the page shows, without the button.
	status, page = b.do(t, "GET", "/blocks/"+fid, "", "")
	require.Equal(t, http.StatusOK, status, page)
	require.NotContains(t, page, "data-force-api")
	require.Contains(t, page, `id="sign-in-to-change" href="../login?next=blocks/`+fid+`"`)

	// The completed one shows its items.
	status, page = b.do(t, "GET", "/blocks/"+itoa(done.ID), token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, rowOf(t, page, "attempt-1"), "<td>10</td>")
	require.Contains(t, page, `<span class="status completed">completed</span>`)

	// Forced (as its button does): the page says so, and the next execution takes it.
	status, out := b.do(t, "POST", "/api/v1/blocks/"+fid+"/force", token, `{"forced_by": "dashboard"}`)
	require.Equal(t, http.StatusOK, status, out)
	status, page = b.do(t, "GET", "/blocks/"+fid, token, "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, `<span class="badge forced">forced</span>`)
	require.Contains(t, page, `<p class="note" id="block-forced">`)
	require.NotContains(t, page, "data-force-api")
	next, err := b.client.StartExecution(b.ctx, "app", "import", nil)
	require.NoError(t, err)
	got, err := next.NumericBlocks(b.ctx, taskling.NumericRange{From: 31, To: 31, MaxSize: 1}, &taskling.BlockOptions{OnlyOld: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, failed.ID, got[0].ID)
	require.NoError(t, got[0].Complete(b.ctx, 10))
	require.NoError(t, next.Complete(b.ctx))
	status, page = b.do(t, "GET", "/blocks/"+fid, token, "")
	require.Equal(t, http.StatusOK, status, page)
	second := rowOf(t, page, "attempt-2")
	require.Contains(t, second, `href="../executions/`+itoa(next.ID())+`"`)
	require.Contains(t, second, `<span class="badge forced">forced</span>`)
	require.Contains(t, second, `<span class="status completed">completed</span>`)
	require.Contains(t, page, `<dd id="block-status"><span class="status completed">completed</span></dd>`)

	status, _ = b.do(t, "GET", "/blocks/999999", token, "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.do(t, "GET", "/blocks/0", token, "")
	require.Equal(t, http.StatusBadRequest, status)
}

// A browser's session sees protected block pages only once signed in, and forces only with the
// header the dashboard's script sends, as for any other change.
func TestForceFromABrowserSessionNeedsSignInAndTheDashboardHeader(t *testing.T) {
	t.Parallel()
	srv, client := mounted(t)
	x, err := client.StartExecution(t.Context(), "app", "import", nil)
	require.NoError(t, err)
	blocks, err := x.NumericBlocks(t.Context(), taskling.NumericRange{From: 1, To: 5, MaxSize: 5}, nil)
	require.NoError(t, err)
	require.NoError(t, blocks[0].Fail(t.Context(), "boom"))
	require.NoError(t, x.Complete(t.Context()))
	id := itoa(blocks[0].ID)

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	get := func(path string) (int, string) {
		resp, err := browser.Get(srv.URL + path)
		require.NoError(t, err)
		return resp.StatusCode, readBody(t, resp)
	}
	for _, path := range []string{"/taskling/blocks/" + id, "/taskling/executions/" + itoa(x.ID())} {
		status, page := get(path)
		require.Equal(t, http.StatusUnauthorized, status, "%s: reads are protected", path)
		require.Contains(t, page, `id="login-form"`)
		require.NotContains(t, page, "boom")
	}
	resp, err := browser.PostForm(srv.URL+"/taskling/login", url.Values{"token": {token}, "next": {"blocks/" + id}})
	require.NoError(t, err)
	page := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "/taskling/blocks/"+id, resp.Request.URL.Path, "sign-in leads back to the block")
	require.Contains(t, page, `data-force-api="../api/v1/blocks/`+id+`/force"`)
	require.Contains(t, page, `<output id="force-status" role="status">`)

	force := func(header bool) int {
		req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/taskling/api/v1/blocks/"+id+"/force", strings.NewReader(`{"forced_by": "dashboard"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if header {
			req.Header.Set("X-Taskling-Request", "1")
		}
		resp, err := browser.Do(req)
		require.NoError(t, err)
		readBody(t, resp)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, force(false), "a cross-site form cannot force")
	bl, err := client.Block(t.Context(), blocks[0].ID)
	require.NoError(t, err)
	require.False(t, bl.ForcePending)
	require.Equal(t, http.StatusOK, force(true))
	bl, err = client.Block(t.Context(), blocks[0].ID)
	require.NoError(t, err)
	require.True(t, bl.ForcePending)
	_, page = get("/taskling/blocks/" + id)
	require.Contains(t, page, `<span class="badge forced">forced</span>`)
	_, page = get("/taskling/executions/" + itoa(x.ID()))
	require.Contains(t, page, `<a class="block" href="../blocks/`+id+`">`)
}

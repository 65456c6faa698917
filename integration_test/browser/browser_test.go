// Package browser tests the dashboard in a real browser: headless Chromium driven by chromedp. It
// lives in the integration_test module so that the root module's tests need only Go and
// PostgreSQL.
package browser_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/internal/principals"
	"github.com/taskling-go/taskling/taskling"
)

func TestMain(m *testing.M) {
	// httptest's server closes idle keep-alive connections asynchronously.
	testutil.VerifyNoLeaks(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

const token = "Yc0+9hQm/3xT1vLd8Rz2Nw5Kp7Gs4Bj6Fe0Ua2Hi8="

var fast = taskling.TaskSettings{KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second}

// chromium finds Debian's chromium. Without it the test fails (CI installs it, see .ci/run),
// unless TASKLING_SKIP_BROWSER=1 says to skip it on a local machine without a browser (never
// under CI=…).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TASKLING_SKIP_BROWSER") == "1" && os.Getenv("CI") == "" {
		t.Skip("no chromium on PATH and TASKLING_SKIP_BROWSER=1")
	}
	t.Fatal("the browser test needs chromium on PATH (apt-get install chromium); set TASKLING_SKIP_BROWSER=1 to skip it locally")
	return ""
}

// TestDashboardInARealBrowser loads the dashboard in headless Chromium, watches a running
// execution's progress bar move with the auto-refresh, raises the limit through the form, and
// sees the task page (and the next start) obey it. TASKLING_UPDATE_SCREENSHOT=1 writes the
// screenshots under docs/.
func TestDashboardInARealBrowser(t *testing.T) {
	t.Parallel()
	began := time.Now()
	browser := chromium(t)
	ctx := context.Background()

	_, client, srv := serveDashboard(t, 1)
	var err error

	// History to look at: a completed import, a completed export, then a running export that
	// advances its progress, and a start denied by the limit.
	require.NoError(t, client.Run(ctx, "billing", "import", func(ctx context.Context, e *taskling.Execution) error {
		return e.SetProgress(ctx, 250, 250)
	}, &taskling.StartOptions{ReferenceValue: "ledger-2026-11-20"}))
	require.NoError(t, client.Run(ctx, "billing", "export", func(ctx context.Context, e *taskling.Execution) error {
		return e.SetProgress(ctx, 1000, 1000)
	}, &taskling.StartOptions{ReferenceValue: "2026-11-20.csv"}))
	running, err := client.StartExecution(ctx, "billing", "export", &taskling.StartOptions{ReferenceValue: "2026-11-21.csv"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = running.Complete(context.Background()) })
	_, err = client.StartExecution(ctx, "billing", "export", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	// And a start waiting for that slot, queued until the test ends.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if e, err := client.StartExecution(waitCtx, "billing", "export", &taskling.StartOptions{WaitForSlot: true}); err == nil {
			_ = e.Complete(context.Background())
		}
	}()
	t.Cleanup(func() { stopWaiting(); <-waited })
	require.Eventually(t, func() bool {
		d, err := client.Task(ctx, "billing", "export")
		return err == nil && d.Waiting == 1
	}, 10*time.Second, 20*time.Millisecond, "the waiter is queued")
	workCtx, stopWork := context.WithCancel(ctx)
	workDone := make(chan struct{})
	// It advances for 50 s, longer than the browser's whole budget: on a loaded machine the task
	// page may first be read many seconds in, and must still see the bar move.
	go func() {
		defer close(workDone)
		for done := int64(0); done <= 1000 && workCtx.Err() == nil; done += 2 {
			_ = running.SetProgress(workCtx, done, 1000)
			select {
			case <-workCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stopWork(); <-workDone })

	bctx := openBrowser(t, browser, 30*time.Second)

	// Reads are protected: the dashboard asks for the token once, then a session cookie (which no
	// script can read) carries the browser.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`table.tasks`)),
	))
	cookies, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.cookie`))
	require.NoError(t, err)
	require.Empty(t, cookies, "the session cookie is HttpOnly")
	stored, err := chromedp.Run(bctx, chromedp.Evaluate[int](`localStorage.length`))
	require.NoError(t, err)
	require.Zero(t, stored, "nothing is kept in localStorage")
	row := text(t, bctx, `table.tasks tbody`)
	require.Contains(t, row, "billing/export")
	require.Contains(t, row, "1 / 1")
	require.Contains(t, row, "1 waiting for a slot", "the queue for the slot shows")
	screenshot(t, bctx, "dashboard-tasks.png")

	// The task page's progress bar moves with the auto-refresh.
	progress := chromedp.CSS(`#progress-` + strconv.FormatInt(running.ID(), 10))
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/tasks/billing/export"),
		chromedp.WaitVisible(progress),
	))
	first := progressValue(t, bctx, progress)
	moved := first
	for deadline := time.Now().Add(10 * time.Second); moved <= first && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		moved = progressValue(t, bctx, progress)
	}
	require.Greater(t, moved, first, "the progress bar moves without reloading the page")
	waiting := text(t, bctx, `#waiting`)
	require.Contains(t, waiting, "1 start (the oldest since ", "the task page shows the queue")
	stopWaiting() // before the limit is raised, so that the slots counted below are known
	<-waited

	// Raise the limit through the form: the session allows it.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.SetValue(chromedp.CSS(`#limit-input`), "3"),
		chromedp.Click(chromedp.CSS(`#set-limit`)),
	))
	// The form reports the saved override, and the page (refreshed by the form or by the
	// auto-refresh, whichever comes first) shows the new limit.
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("limit-in-force").textContent.trim() === "3" &&
		document.getElementById("form-status").textContent === "saved: limit 3 (override)"`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the task page shows the new limit")
	second, err := client.StartExecution(ctx, "billing", "export", nil)
	require.NoError(t, err, "the next start obeys the limit set in the browser")
	t.Cleanup(func() { _ = second.Complete(context.Background()) })

	checkRaisedLimit(t, bctx, srv.URL+"/tasks/billing/export", second.ID())
	screenshot(t, bctx, "dashboard.png")
	t.Logf("browser test ran in %s", time.Since(began).Round(10*time.Millisecond))
}

// checkRaisedLimit: a fresh load of the task page at url shows the limit raised to 3 in the
// browser, its source and the new holder, and the change in the task's changes — when, who (the
// principal the browser signed in as, TASKLING_API_TOKEN's "token", and the by, that principal
// too), the field, old → new.
func checkRaisedLimit(t *testing.T, bctx context.Context, url string, holder int64) {
	t.Helper()
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#execution-`+strconv.FormatInt(holder, 10))),
	))
	summary := text(t, bctx, `dl.summary`)
	require.Contains(t, summary, "override")
	require.Contains(t, summary, "2 / 3")
	changes := text(t, bctx, `#changes tbody`)
	require.Contains(t, changes, "token\ttoken\tconcurrency_limit\tinherited → 3")
}

// openBrowser starts headless Chromium for the test (closed when it ends); the test's steps in
// the browser must all end within budget.
func openBrowser(t *testing.T, browser string, budget time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}, extra...)...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, budget)
	t.Cleanup(cancelTimeout)
	return bctx
}

// TestSubmissionsInARealBrowser follows submissions in headless Chromium: the task page lists the
// waiting ones with their positions, a submission's page shows it waiting, then running with its
// progress and completed as client.Work runs it, all by the auto-refresh; and the Cancel button
// cancels a waiting one, which then never runs.
func TestSubmissionsInARealBrowser(t *testing.T) {
	t.Parallel()
	began := time.Now()
	browser := chromium(t)
	ctx := context.Background()

	pool, _ := pgtest.NewDB(t)
	// Nothing dies here: a long threshold keeps a loaded machine's late heartbeat from losing the run.
	s := taskling.TaskSettings{ConcurrencyLimit: 1, KeepAliveInterval: 200 * time.Millisecond, KeepAliveDeathThreshold: 20 * time.Second}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Defaults: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	// Refreshes are rarer than in the other test: each replaces the buttons this test clicks.
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, RefreshInterval: time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	first, err := client.Submit(ctx, "reports", "daily", &taskling.SubmitOptions{ReferenceValue: "2026-11-21", Header: map[string]string{"day": "2026-11-21"}})
	require.NoError(t, err)
	second, err := client.Submit(ctx, "reports", "daily", &taskling.SubmitOptions{ReferenceValue: "2026-11-22"})
	require.NoError(t, err)
	row := func(id int64) string { return `#submission-` + strconv.FormatInt(id, 10) }

	// Sign in on the task page: both wait, in submission order.
	bctx := openBrowser(t, browser, time.Minute)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/tasks/reports/daily"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(row(second))),
	))
	for i, id := range []int64{first, second} {
		status := text(t, bctx, row(id)+` .status`)
		require.Equal(t, "waiting", status)
		position := text(t, bctx, row(id)+` .position`)
		require.Equal(t, strconv.Itoa(i+1), position)
	}

	// Cancel the second with its button: the page shows it cancelled, the first keeps its place.
	secondID := strconv.FormatInt(second, 10)
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#cancel-`+secondID))))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelector("#submission-`+secondID+` .status").textContent === "cancelled" &&
		document.getElementById("cancel-status").textContent === "submission #`+secondID+`: cancelled" &&
		!document.getElementById("cancel-`+secondID+`")`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the task page shows the cancelled submission, without its button")
	cancelled, err := client.Submission(ctx, second)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCancelled, cancelled.Status)
	require.Equal(t, "cancelled from the dashboard", cancelled.CancelReason)

	// The first's own page: waiting, first in the queue.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/submissions/"+strconv.FormatInt(first, 10)),
		chromedp.WaitVisible(chromedp.CSS(`#submission-status`)),
	))
	status := text(t, bctx, `#submission-status`)
	require.Equal(t, "waiting", status)
	position := text(t, bctx, `#submission-position`)
	require.Equal(t, "1 in the queue", position)

	// A worker takes it: the page follows it running, with its progress, then completed.
	release := make(chan struct{})
	ran := make(chan int64, 10)
	workCtx, stopWork := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() {
		worked <- client.Work(workCtx, "reports", "daily", func(ctx context.Context, e *taskling.Execution) error {
			ran <- e.SubmissionID()
			if err := e.SetProgress(ctx, 25, 100); err != nil {
				return err
			}
			select {
			case <-release:
				return e.SetProgress(ctx, 100, 100)
			case <-ctx.Done():
				return ctx.Err()
			}
		}, &taskling.WorkOptions{DrainTimeout: time.Second})
	}()
	stop := sync.OnceValue(func() error { stopWork(); return <-worked })
	t.Cleanup(func() { require.NoError(t, stop()) })
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("submission-status").textContent.trim() === "in_progress" &&
		document.getElementById("submission-progress") !== null &&
		document.getElementById("submission-progress").value === 25`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the submission page shows it running at 25/100")
	executions := text(t, bctx, `#submission-executions`)
	require.Regexp(t, `^#\d+$`, strings.TrimSpace(executions), "its one attempt's execution")
	close(release)
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("submission-status").textContent.trim() === "completed" &&
		document.getElementById("submission-progress").value === 100 &&
		document.getElementById("cancel-`+strconv.FormatInt(first, 10)+`") === null`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the submission page shows it completed")
	done, err := client.Submission(ctx, first)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCompleted, done.Status)

	require.NoError(t, stop())
	close(ran)
	var runs []int64
	for id := range ran {
		runs = append(runs, id)
	}
	require.Equal(t, []int64{first}, runs, "the cancelled submission never ran")
	t.Logf("browser test ran in %s", time.Since(began).Round(10*time.Millisecond))
}

// TestBlocksInARealBrowser signs in on an execution's page, which lists the blocks it attempted,
// follows a failed block's link to its page, and forces it with the Force button: the page says
// it is forced, the task page lists it forced among the blocks at their retry limit, and the
// next execution takes it first.
func TestBlocksInARealBrowser(t *testing.T) {
	t.Parallel()
	began := time.Now()
	browser := chromium(t)
	ctx := context.Background()

	pool, _ := pgtest.NewDB(t)
	s := taskling.TaskSettings{ConcurrencyLimit: 1, KeepAliveInterval: 200 * time.Millisecond, KeepAliveDeathThreshold: 20 * time.Second}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Defaults: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	// Refreshes are rare: each replaces the links and buttons this test clicks.
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, RefreshInterval: time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	// An import over rows 1 to 200 in blocks of 100: the first completes, the second fails.
	x, err := client.StartExecution(ctx, "ledger", "import", &taskling.StartOptions{ReferenceValue: "2026-11-21"})
	require.NoError(t, err)
	blocks, err := x.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 200, MaxSize: 100}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	require.NoError(t, blocks[0].Complete(ctx, 100))
	require.NoError(t, blocks[1].Fail(ctx, "row 142: <bad> amount"))
	require.NoError(t, x.Complete(ctx))
	failed := strconv.FormatInt(blocks[1].ID, 10)
	row := `#block-` + failed

	// Sign in on the execution's page: its blocks, the failed one at its retry limit.
	bctx := openBrowser(t, browser, time.Minute)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/executions/"+strconv.FormatInt(x.ID(), 10)),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#execution-blocks `+row)),
	))
	status := text(t, bctx, `#execution-status`)
	require.Equal(t, "completed", status)
	failedRow := text(t, bctx, row)
	require.Contains(t, failedRow, "101–200")
	require.Contains(t, failedRow, "failed")
	require.Contains(t, failedRow, "at retry limit")
	require.Contains(t, failedRow, "row 142: <bad> amount", "the message shows as text")
	done := text(t, bctx, `#block-`+strconv.FormatInt(blocks[0].ID, 10)+` .status`)
	require.Equal(t, "completed", done)

	// Follow the failed block's link to its page.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(row+` a.block`)),
		chromedp.WaitVisible(chromedp.CSS(`#block-summary`)),
	))
	blockStatus := text(t, bctx, `#block-status`)
	require.Equal(t, "failed at retry limit", blockStatus)
	attempt := text(t, bctx, `#attempt-1`)
	require.Contains(t, attempt, "#"+strconv.FormatInt(x.ID(), 10))
	require.Contains(t, attempt, "row 142: <bad> amount")

	// Force it: the page says forced, and the button is gone.
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#force-`+failed))))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("force-status").textContent === "block #`+failed+`: forced" &&
		document.getElementById("block-status").textContent.indexOf("forced") >= 0 &&
		document.getElementById("block-forced") !== null &&
		!document.getElementById("force-`+failed+`")`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the block page shows the block forced, without its button")
	b, err := client.Block(ctx, blocks[1].ID)
	require.NoError(t, err)
	require.True(t, b.ForcePending)

	// The task page lists it among the blocks at their retry limit, forced.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/tasks/ledger/import"),
		chromedp.WaitVisible(chromedp.CSS(`#blocks-at-limit `+row)),
	))
	listed := text(t, bctx, `#blocks-at-limit `+row)
	require.Contains(t, listed, "forced")
	counts := text(t, bctx, `#block-counts`)
	require.Contains(t, counts, "1 completed")
	require.Contains(t, counts, "1 failed")

	// The next execution takes it first.
	next, err := client.StartExecution(ctx, "ledger", "import", nil)
	require.NoError(t, err)
	got, err := next.NumericBlocks(ctx, taskling.NumericRange{From: 201, To: 201, MaxSize: 1}, &taskling.BlockOptions{OnlyOld: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, blocks[1].ID, got[0].ID)
	require.True(t, got[0].Forced)
	require.NoError(t, got[0].Complete(ctx, 100))
	require.NoError(t, next.Complete(ctx))
	t.Logf("browser test ran in %s", time.Since(began).Round(10*time.Millisecond))
}

// TestTaskTimelineInARealBrowser opens the task page of a task with two slots whose holders the
// test started and completed over the last hour (their times moved back on the database), one of
// them failed, one reclaimed from a dead holder, and a start denied: Chromium draws a bar per
// holder in the slot timeline, the reclaim marked, and the per-minute chart of grants, denials and
// reclaims. TASKLING_UPDATE_SCREENSHOT=1 writes docs/task-timeline.png.
func TestTaskTimelineInARealBrowser(t *testing.T) {
	t.Parallel()
	began := time.Now()
	browser := chromium(t)
	ctx := context.Background()

	pool, _ := pgtest.NewDB(t)
	s := taskling.TaskSettings{ConcurrencyLimit: 2, KeepAliveInterval: 200 * time.Millisecond, KeepAliveDeathThreshold: 20 * time.Second}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Defaults: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, RefreshInterval: 2 * time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	// Ten finished runs, moved back so that they spread over the hour: each starts 5 minutes
	// after the previous and lasts 7, so two slots are in use at times.
	var finished []int64
	for i := range 10 {
		e, err := client.StartExecution(ctx, "reports", "nightly", nil)
		require.NoError(t, err)
		if i == 6 {
			require.NoError(t, e.RecordError(ctx, "upstream timed out", true))
		}
		require.NoError(t, e.Complete(ctx))
		ago := time.Duration(55-5*i) * time.Minute
		_, err = pool.Exec(ctx, `UPDATE taskling.task_execution SET started_at = now() - $2::interval WHERE id = $1`, e.ID(), ago)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE taskling.execution_end SET ended_at = now() - $2::interval WHERE execution_id = $1`, e.ID(), ago-7*time.Minute)
		require.NoError(t, err)
		finished = append(finished, e.ID())
	}
	// One running holder; another, in Override mode, dies (no heartbeat), a start is denied while
	// it holds the second slot, and the next start reclaims it.
	running, err := client.StartExecution(ctx, "reports", "nightly", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = running.Complete(context.Background()) })
	silent, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-2", Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 2, DeathMode: taskling.DeathModeOverride, OverrideThreshold: 1500 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(silent.Close)
	deadStarted := time.Now()
	dead, err := silent.StartExecution(ctx, "reports", "nightly", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dead.Complete(context.Background()) })
	_, err = client.StartExecution(ctx, "reports", "nightly", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	time.Sleep(time.Until(deadStarted.Add(1600 * time.Millisecond))) // past its threshold (each try would be a denial)
	reclaimer, err := client.StartExecution(ctx, "reports", "nightly", nil)
	require.NoError(t, err, "the dead holder's slot is reclaimed")
	t.Cleanup(func() { _ = reclaimer.Complete(context.Background()) })

	bctx := openBrowser(t, browser, 30*time.Second)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/login?next=tasks/reports/nightly"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#slot-timeline`)),
		chromedp.WaitVisible(chromedp.CSS(`#rate-chart`)),
	))
	// Read in one script run: the auto-refresh replaces the page's content now and then.
	type drawn struct {
		Bars      []string `json:"bars"`
		Classes   []string `json:"classes"`
		Links     []string `json:"links"`
		Reclaims  []string `json:"reclaims"`
		Lanes     int      `json:"lanes"`
		Rates     int      `json:"rates"`
		Series    []string `json:"series"`
		BarWidth  float64  `json:"barWidth"`
		Tooltip   string   `json:"tooltip"`
		ChartText string   `json:"chartText"`
	}
	got, err := chromedp.Run(bctx, chromedp.Evaluate[drawn](`(function () {
		var q = function (s) { return Array.prototype.slice.call(document.querySelectorAll(s)); };
		var bars = q('#slot-timeline rect.bar');
		var series = {};
		q('#rate-chart rect.rate').forEach(function (r) { series[r.classList[1]] = true; });
		return {
			bars: bars.map(function (r) { return r.getAttribute('data-execution'); }),
			classes: bars.map(function (r) { return r.getAttribute('class'); }),
			links: q('#slot-timeline a').map(function (a) { return a.getAttribute('href'); }),
			reclaims: q('#slot-timeline path.reclaim-mark').map(function (p) { return p.id; }),
			lanes: q('#slot-timeline rect.lane').length,
			rates: q('#rate-chart rect.rate').length,
			series: Object.keys(series).sort(),
			barWidth: document.getElementById('bar-' + `+strconv.FormatInt(finished[0], 10)+`).getBoundingClientRect().width,
			tooltip: document.querySelector('#bar-`+strconv.FormatInt(dead.ID(), 10)+` title').textContent,
			chartText: document.getElementById('rate-totals').innerText
		};
	})()`))
	require.NoError(t, err)
	want := []string{}
	for _, id := range append(finished, running.ID(), dead.ID(), reclaimer.ID()) {
		want = append(want, strconv.FormatInt(id, 10))
	}
	require.ElementsMatch(t, want, got.Bars, "a bar per holder; none for the denied start")
	require.Contains(t, got.Links, "../../executions/"+strconv.FormatInt(finished[0], 10))
	require.Contains(t, got.Classes, "bar failed")
	require.Contains(t, got.Classes, "bar dead reclaimed")
	require.Contains(t, got.Classes, "bar in_progress")
	require.Equal(t, []string{"reclaim-" + strconv.FormatInt(dead.ID(), 10)}, got.Reclaims)
	require.Equal(t, 2, got.Lanes, "a lane per slot")
	require.Greater(t, got.BarWidth, 50.0, "a 7-minute run is a long bar")
	require.Contains(t, got.Tooltip, "on worker-2")
	require.Contains(t, got.Tooltip, "reclaimed")
	require.Equal(t, []string{"denials", "grants", "reclaims"}, got.Series)
	require.Greater(t, got.Rates, 10)
	require.Contains(t, got.ChartText, "13 granted")
	require.Contains(t, got.ChartText, "1 blocked")
	require.Contains(t, got.ChartText, "1 reclaimed")
	screenshot(t, bctx, "task-timeline.png")
	t.Logf("browser test ran in %s", time.Since(began).Round(10*time.Millisecond))
}

// text is the visible text of the first element matching the CSS selector, read in one script
// run: the auto-refresh may replace the element between a query and a read in two steps.
func text(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	sel, err := json.Marshal(selector)
	require.NoError(t, err)
	v, err := chromedp.Run(ctx, chromedp.Evaluate[*string](`(function () { var e = document.querySelector(`+string(sel)+`); return e ? e.innerText : null; })()`))
	require.NoError(t, err)
	require.NotNil(t, v, "no element matches %s", selector)
	return strings.TrimSpace(*v)
}

// waitText waits until the first element matching selector reads want: the auto-refresh may be
// replacing the element (or the page loading) when it is first looked for.
// navigate loads url, again if the load was aborted: a navigation the page started itself (its
// auto-refresh, a form it submitted) may cut this one short (net::ERR_ABORTED, seen in CI).
func navigate(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	var err error
	for range 3 {
		if err = chromedp.Do(ctx, chromedp.Navigate(url)); err == nil || !strings.Contains(err.Error(), "ERR_ABORTED") {
			break
		}
	}
	require.NoError(t, err)
}

func waitText(t *testing.T, ctx context.Context, selector, want string) {
	t.Helper()
	sel, err := json.Marshal(selector)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[*string](`(function () { var e = document.querySelector(`+string(sel)+`); return e ? e.innerText : null; })()`))
		if err != nil || v == nil {
			return false
		}
		return strings.TrimSpace(*v) == want
	}, 5*time.Second, 20*time.Millisecond, "%s never read %q", selector, want)
}

func progressValue(t *testing.T, ctx context.Context, sel chromedp.CSS) int {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.AttributeValue(sel, "value"))
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(v.Value))
	require.NoError(t, err, "value %q", v.Value)
	return n
}

// screenshot saves the page under docs/ when TASKLING_UPDATE_SCREENSHOT=1, so that a normal
// test run leaves the tree clean.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("TASKLING_UPDATE_SCREENSHOT") != "1" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", name), png, 0o644))
}

// TestTaskListInARealBrowser pages through 120 tasks in headless Chromium: the search box with
// the application filter, the status filter, next and previous pages grouped by application,
// all kept by the auto-refresh.
func TestTaskListInARealBrowser(t *testing.T) {
	t.Parallel()
	began := time.Now()
	browser := chromium(t)
	ctx := context.Background()

	pool, client, srv := serveDashboard(t, 2)
	var err error

	// alpha, beta and gamma with job-000 … job-039 each; beta/job-007 runs.
	_, err = pool.Exec(ctx, `INSERT INTO taskling.task_definition (application_name, task_name, declared_limit, declared_by)
SELECT app, 'job-' || lpad(i::text, 3, '0'), 2, 'seed' FROM unnest(array['alpha', 'beta', 'gamma']) app, generate_series(0, 39) i`)
	require.NoError(t, err)
	running, err := client.StartExecution(ctx, "beta", "job-007", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = running.Complete(context.Background()) })

	bctx := openBrowser(t, browser, 45*time.Second)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`table.tasks`)),
	))
	rows := func() int { // polled by require.Eventually, in another goroutine: no require here
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("table.tasks tbody tr:not(.group)").length`))
		if err != nil {
			return -1
		}
		return n
	}
	require.Eventually(t, func() bool { return rows() == 50 }, 5*time.Second, 20*time.Millisecond, "the first page") // the auto-refresh may be replacing the table
	waitText(t, bctx, `#task-count`, "120 tasks")

	// Search within one application.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.SetValue(chromedp.CSS(`#filter-q`), "JOB-01"),
		chromedp.SetValue(chromedp.CSS(`#filter-app`), "beta"),
		chromedp.Click(chromedp.CSS(`#filter-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#filter-clear`)),
	))
	waitText(t, bctx, `#task-count`, "10 tasks match")
	list := text(t, bctx, `table.tasks tbody`)
	require.Contains(t, list, "beta/job-010")
	require.Contains(t, list, "beta/job-019")
	require.NotContains(t, list, "alpha/")
	require.Eventually(t, func() bool { return rows() == 10 }, 5*time.Second, 20*time.Millisecond) // the auto-refresh may be replacing the table

	// The status filter: a changed select submits the form by itself (SetValue fires "change").
	navigate(t, bctx, srv.URL+"/")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.WaitVisible(chromedp.CSS(`#filter-status`)),
		chromedp.SetValue(chromedp.CSS(`#filter-status`), "busy"),
		chromedp.WaitVisible(chromedp.CSS(`#filter-clear`)),
	))
	require.Equal(t, "1 task matches", text(t, bctx, `#task-count`), "the busy tasks only")
	require.Contains(t, text(t, bctx, `table.tasks tbody`), "beta/job-007")

	// Page forward through every task: page 2 is beta/job-010 … gamma/job-019, in two groups.
	navigate(t, bctx, srv.URL+"/")
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#next-page`))))
	// A click from the page itself: the auto-refresh may replace the link between a lookup and a click.
	_, err = chromedp.Run(bctx, chromedp.Evaluate[bool](`(document.getElementById("next-page").click(), true)`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#prev-page`))))
	check := func() {
		t.Helper()
		list := text(t, bctx, `table.tasks tbody`)
		require.Contains(t, list, "beta/job-010")
		require.Contains(t, list, "gamma/job-019")
		require.NotContains(t, list, "beta/job-009")
		require.NotContains(t, list, "gamma/job-020")
		require.Eventually(t, func() bool { return rows() == 50 }, 5*time.Second, 20*time.Millisecond) // the auto-refresh may be replacing the table
		groups, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("table.tasks tr.group").length`))
		require.NoError(t, err)
		require.Equal(t, 2, groups, "grouped by application")
	}
	check()
	// The auto-refresh keeps the page.
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("refresh-status").textContent.indexOf("updated") === 0`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the page refreshes")
	check()
	screenshot(t, bctx, "dashboard-task-list.png")

	// And back.
	_, err = chromedp.Run(bctx, chromedp.Evaluate[bool](`(document.getElementById("prev-page").click(), true)`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitNotPresent(chromedp.CSS(`#prev-page`))))
	require.Contains(t, text(t, bctx, `table.tasks tbody`), "alpha/job-000")
	require.Eventually(t, func() bool { return rows() == 50 }, 5*time.Second, 20*time.Millisecond) // the auto-refresh may be replacing the table
	t.Logf("browser test ran in %s", time.Since(began).Round(10*time.Millisecond))
}

// serveDashboard serves the dashboard of a client ("worker-1", the fast settings at limit) on a
// fresh database, signed in with token.
func serveDashboard(t *testing.T, limit int) (*pgxpool.Pool, *taskling.Client, *httptest.Server) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	s := fast
	s.ConcurrencyLimit = limit
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Defaults: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, RefreshInterval: 250 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return pool, client, srv
}

// TestSignInNeverLeavesForAnotherHost is issue 23 item 1: safeNext let "\t//evil.example"
// through, and after a real sign-in Chromium (which drops tabs from URLs) landed on that other
// host. Chromium resolves evil.example to a second local server, so that the landing shows.
func TestSignInNeverLeavesForAnotherHost(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	_, _, srv := serveDashboard(t, 1)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`<!doctype html><title>evil</title><p id="evil">another host</p>`))
	}))
	t.Cleanup(evil.Close)
	bctx := openBrowser(t, browser, time.Minute,
		chromedp.Flag("host-resolver-rules", "MAP evil.example "+strings.TrimPrefix(evil.URL, "http://")))
	for _, next := range []string{"\t//evil.example/", "\n//evil.example/", "\r\n//evil.example", `/\evil.example/`, " //evil.example/", "%09//evil.example/"} {
		require.NoError(t, chromedp.Do(bctx,
			chromedp.Navigate(srv.URL+"/login?next="+url.QueryEscape(next)),
			chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		))
		require.NoError(t, chromedp.Do(bctx,
			chromedp.SetValue(chromedp.CSS(`#login-token`), token),
			chromedp.Click(chromedp.CSS(`#login-submit`)),
		))
		var landed string
		require.Eventually(t, func() bool {
			v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.readyState === "complete" && !document.getElementById("login-form") ? location.href : ""`))
			landed = v
			return err == nil && v != ""
		}, 10*time.Second, 50*time.Millisecond, "the sign-in leads somewhere (next %q)", next)
		require.Equal(t, srv.URL+"/", landed, "next %q: the browser stays on the dashboard", next)
		// Sign out, so that the next round signs in again.
		require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#sign-out`)), chromedp.WaitVisible(chromedp.CSS(`#login-form`))))
	}
}

// TestRatesInARealBrowser: the task page shows the task's rate, where it comes from and when the
// next start is allowed; an operator raises it through the page's form, the page shows the
// override, and the next start obeys it at once.
func TestRatesInARealBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	ctx := context.Background()
	pool, _, srv := serveDashboard(t, 5)
	s := fast
	s.ConcurrencyLimit, s.Rate = 5, taskling.Rate{Count: 2, Per: time.Hour, Burst: 2}
	rated, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-2", Defaults: s})
	require.NoError(t, err)
	t.Cleanup(rated.Close)
	for range 2 {
		require.NoError(t, rated.Run(ctx, "vendor", "sync", func(context.Context, *taskling.Execution) error { return nil }, nil))
	}
	_, err = rated.StartExecution(ctx, "vendor", "sync", nil)
	require.ErrorIs(t, err, taskling.ErrRateLimited)

	bctx := openBrowser(t, browser, 30*time.Second)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`table.tasks`)),
		chromedp.Navigate(srv.URL+"/tasks/vendor/sync"),
		chromedp.WaitVisible(chromedp.CSS(`#rate`)),
	))
	shown := text(t, bctx, `#rate`)
	require.Contains(t, shown, "2/1h,burst=2 (declared)")
	require.Regexp(t, `next start allowed in (29m|30m)`, shown, "an hour's two units are spent")

	require.NoError(t, chromedp.Do(bctx,
		chromedp.SetValue(chromedp.CSS(`#rate-input`), "600/1m,burst=2"),
		chromedp.Click(chromedp.CSS(`#set-rate`)),
	))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("rate").textContent.includes("600/1m,burst=2 (override)")`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the task page shows the override")
	e, err := rated.StartExecution(ctx, "vendor", "sync", &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err, "the raised rate admits at once")
	require.NoError(t, e.Complete(ctx))
}

// TestTheSignInFormKeepsWhatIsTyped: the sign-in page is not auto-refreshed — a refresh replaced
// its form every interval, taking the token being typed with it (and the node a script had just
// found: TestSignInNeverLeavesForAnotherHost failed so on a loaded machine) — and a field of the
// task page being filled in is not replaced by the refresh either.
func TestTheSignInFormKeepsWhatIsTyped(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	_, client, srv := serveDashboard(t, 1) // refreshes every 250 ms
	require.NoError(t, client.Run(context.Background(), "app", "task", func(context.Context, *taskling.Execution) error { return nil }, nil))
	bctx := openBrowser(t, browser, 30*time.Second)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), "half a tok"),
		chromedp.Sleep(time.Second),
	))
	typed, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("login-token").value`))
	require.NoError(t, err)
	require.Equal(t, "half a tok", typed, "four refresh intervals later, what was typed is still there")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`table.tasks`)),
		chromedp.Navigate(srv.URL+"/tasks/app/task"),
		chromedp.WaitVisible(chromedp.CSS(`#rate-input`)),
		chromedp.Focus(chromedp.CSS(`#rate-input`)),
		chromedp.SendKeys(chromedp.CSS(`#rate-input`), "30/1m"),
		chromedp.Sleep(time.Second),
	))
	typed, err = chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("rate-input").value`))
	require.NoError(t, err)
	require.Equal(t, "30/1m", typed, "a field being filled in survives the refresh")
}

// TestStoredValuesShowWholeOrCutInARealBrowser is issue 40 item 1 on the dashboard: a page wrote
// a stored value or text escaped for HTML, < as &lt;, so a value full of them made the page four
// times its size. A header, a checkpoint and a block message holding ordinary text show whole, as
// stored; ones full of < (stored with SQL) show their beginning ending with "…", the block
// message's cell a preview and its tooltip the longer beginning.
func TestStoredValuesShowWholeOrCutInARealBrowser(t *testing.T) {
	t.Parallel()
	began := time.Now()
	browser := chromium(t)
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Defaults: fast})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	h, err := dashboard.NewHandler(client, &dashboard.Options{PublicReads: true, RefreshInterval: time.Hour})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	const plain = `say "hi" <b> & 'bye' + more`
	lts := strings.Repeat("<", 20000)
	ids := map[string]int64{}
	for _, kind := range []string{"plain", "lts"} {
		e, err := client.StartExecution(ctx, "ledger", "import", &taskling.StartOptions{Header: map[string]string{"note": plain}})
		require.NoError(t, err)
		require.NoError(t, e.Checkpoint(ctx, plain))
		blocks, err := e.ObjectBlocks(ctx, []any{1}, nil)
		require.NoError(t, err)
		require.NoError(t, blocks[0].Start(ctx))
		require.NoError(t, blocks[0].Fail(ctx, plain))
		require.NoError(t, e.Complete(ctx))
		ids[kind] = e.ID()
		if kind == "lts" {
			for _, q := range []string{
				`UPDATE taskling.task_execution SET header = jsonb_build_array($1::text) WHERE id = $2`,
				`UPDATE taskling.task_execution_event SET message = $1 WHERE execution_id = $2 AND message IS NOT NULL`,
				`UPDATE taskling.block_attempt SET message = $1 WHERE execution_id = $2`,
			} {
				_, err := pool.Exec(ctx, q, lts, e.ID())
				require.NoError(t, err)
			}
		}
	}

	bctx := openBrowser(t, browser, time.Minute)
	open := func(id int64) {
		navigate(t, bctx, srv.URL+"/executions/"+strconv.FormatInt(id, 10))
		require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#execution-events`))))
	}
	open(ids["plain"])
	require.Equal(t, `{"note": "say \"hi\" <b> & 'bye' + more"}`, text(t, bctx, `#execution-header`), "as stored")
	require.Contains(t, text(t, bctx, `#execution-events`), plain)
	require.Equal(t, plain, text(t, bctx, `#execution-blocks .reason`))
	title, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`#execution-blocks .reason`), "title"))
	require.NoError(t, err)
	require.Equal(t, plain, title.Value)

	open(ids["lts"])
	header := text(t, bctx, `#execution-header`)
	require.True(t, strings.HasPrefix(header, `["<<<`) && strings.HasSuffix(header, "<…"), "%.100s", header)
	require.Less(t, len(header), 2*len(lts)/4+256, "at most twice the stored size once escaped: a quarter of the <")
	events := text(t, bctx, `#execution-events`)
	require.Contains(t, events, "<<<…")
	require.NotContains(t, events, lts)
	cell := text(t, bctx, `#execution-blocks .reason`)
	require.True(t, strings.HasSuffix(cell, "<…") && len(cell) < 256/4+8, "a preview: %q", cell)
	title, err = chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`#execution-blocks .reason`), "title"))
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(title.Value, "<…") && len(title.Value) > len(cell) && len(title.Value) <= (2*len(lts)+256)/4+len("…"), "the tooltip: %.100s", title.Value)
	size, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.documentElement.outerHTML.length`))
	require.NoError(t, err)
	require.Less(t, size, 4*2*len(lts)+16<<10, "the page: twice each of the 4 values shown, and the page around them")
	t.Logf("browser test ran in %s", time.Since(began).Round(10*time.Millisecond))
}

// TestDotSegmentsInARealBrowser is issue 40 item 8 in Chromium, which removes a "." or ".." path
// segment from a URL even percent-encoded (so a task named ".." was linked to another page, and
// the key form with key "." sent PUT …/keys/, changing the empty key): the link to a task named
// so (made before such names were refused) reaches its own page, whose forms change it; the key
// form with key "." overrides key "." and leaves the empty key alone.
func TestDotSegmentsInARealBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	ctx := context.Background()
	pool, client, srv := serveDashboard(t, 4)
	_, err := pool.Exec(ctx, `INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('dotapp', '..')`)
	require.NoError(t, err)
	for _, task := range []string{"..", "export"} {
		require.NoError(t, client.Run(ctx, "dotapp", task, func(context.Context, *taskling.Execution) error { return nil }, nil))
	}

	bctx := openBrowser(t, browser, 45*time.Second)
	signIn(t, bctx, srv.URL)
	// Why the path cannot carry the name: Chromium drops the segment, encoded or not.
	resolved, err := chromedp.Run(bctx, chromedp.Evaluate[string](`new URL("tasks/dotapp/%2E%2E", location.href).pathname`))
	require.NoError(t, err)
	require.Equal(t, "/tasks/", resolved)

	_, err = chromedp.Run(bctx, chromedp.Evaluate[bool](`(Array.from(document.querySelectorAll("table.tasks a")).find(function (a) {
		return a.textContent === "dotapp/..";
	}).click(), true)`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the page is loading: its script context changes
		ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.readyState === "complete" && !!document.getElementById("limit-input") &&
			document.querySelector("h1").textContent.trim() === "dotapp/.."`))
		return err == nil && ok
	}, 10*time.Second, 50*time.Millisecond, "the link leads to the task's own page")
	href, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.pathname + location.search`))
	require.NoError(t, err)
	require.Equal(t, "/task?app=dotapp&task=..", href)

	require.NoError(t, chromedp.Do(bctx,
		chromedp.SetValue(chromedp.CSS(`#limit-input`), "3"),
		chromedp.Click(chromedp.CSS(`#set-limit`)),
	))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("form-status").textContent === "saved: limit 3 (override)"`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the page's form changes its own task")
	d, err := client.Task(ctx, "dotapp", "..")
	require.NoError(t, err)
	require.Equal(t, 3, d.Limit)
	d, err = client.Task(ctx, "dotapp", "export")
	require.NoError(t, err)
	require.Equal(t, 4, d.Limit, "and no other")

	navigate(t, bctx, srv.URL+"/tasks/dotapp/export")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.WaitVisible(chromedp.CSS(`#key-input`)),
		chromedp.SetValue(chromedp.CSS(`#key-input`), "."),
		chromedp.SetValue(chromedp.CSS(`#key-limit-input`), "2"),
		chromedp.Click(chromedp.CSS(`#set-key-limit`)),
	))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("key-form-status").textContent.indexOf("saved") === 0`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the key form saved")
	d, err = client.Task(ctx, "dotapp", "export")
	require.NoError(t, err)
	require.Len(t, d.Keys, 1, "key . overridden, the empty key left alone: %+v", d.Keys)
	require.Equal(t, [3]any{".", 2, taskling.KeySourceOverride}, [3]any{d.Keys[0].Key, d.Keys[0].Limit, d.Keys[0].LimitSource})
}

// TestTheDashboardLabelsItsCountsInOneVocabulary is issue 40's dashboard items, in a browser whose
// local time zone is not UTC: the task list and the task page count the starts waiting for a slot
// and the submissions queued apart, each labelled (item 4: "Waiting: 0" with two submissions
// queued); the executions table gives the reference, the key, the cost and the reason their own
// columns and says why ids jump (items 5, 10); a refused start is "blocked" wherever it shows
// (item 6); a critical section is marked internal (item 7); the task's name and state come before
// the operator's form, and the auto-refresh keeps them there (item 8); the header's clock is UTC
// in 24 hours as the tables are (item 9); the summary's slots in use are the table's live
// holders (item 12); and an execution's page gives its key, its cost and its submission (item 5).
func TestTheDashboardLabelsItsCountsInOneVocabulary(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	ctx := context.Background()
	_, client, srv := serveDashboard(t, 1)

	// crm/sync: its slot held under key acme, a start blocked by the limit, two submissions
	// queued for key globex and no worker.
	holder, err := client.StartExecution(ctx, "crm", "sync", &taskling.StartOptions{Key: "acme", ReferenceValue: "sync-1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Complete(context.Background()) })
	_, err = client.StartExecution(ctx, "crm", "sync", &taskling.StartOptions{ReferenceValue: "sync-2"})
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	for range 2 {
		_, err := client.Submit(ctx, "crm", "sync", &taskling.SubmitOptions{Key: "globex"})
		require.NoError(t, err)
	}
	// crm/import holds its critical section, an internal task of its own.
	importer, err := client.StartExecution(ctx, "crm", "import", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = importer.Complete(context.Background()) })
	section, err := importer.CriticalSection(ctx, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = section.Release(context.Background()) })
	// crm/report ran a submission.
	sub, err := client.Submit(ctx, "crm", "report", nil)
	require.NoError(t, err)
	ran := make(chan int64, 1)
	workCtx, stopWork := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() {
		worked <- client.Work(workCtx, "crm", "report", func(_ context.Context, e *taskling.Execution) error {
			ran <- e.ID()
			return nil
		}, nil)
	}()
	t.Cleanup(func() { stopWork(); require.NoError(t, <-worked) })
	attempt := <-ran

	bctx := openBrowser(t, browser, time.Minute, chromedp.Env("TZ=America/Los_Angeles"))
	signIn(t, bctx, srv.URL)
	waitText(t, bctx, `[id="task-crm/sync"] .badge.queued`, "2 submissions queued")
	require.NotContains(t, text(t, bctx, `[id="task-crm/sync"]`), "waiting for a slot", "no start waits for its slot")
	internal := text(t, bctx, `tr.internal`)
	require.Contains(t, internal, "crm/import [critical section]")
	require.Contains(t, internal, "internal: critical section of import")
	require.NotContains(t, text(t, bctx, `[id="task-crm/import"]`), "internal", "the task itself is not marked")

	// The header's clock, once the auto-refresh ran: UTC, 24 hours, within a minute of now.
	clock, err := chromedp.Run(bctx, chromedp.Poll[string](`(function () {
		var m = /^updated (\d\d):(\d\d):(\d\d)Z$/.exec(document.getElementById("refresh-status").textContent);
		if (!m) { return ""; }
		var now = new Date(), shown = new Date(now);
		shown.setUTCHours(+m[1], +m[2], +m[3], 0);
		var off = Math.abs(now - shown) % 86400000;
		return Math.min(off, 86400000 - off) < 60000 ? m[0] : "";
	})()`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the header's clock shows UTC in 24 hours")
	require.NotEmpty(t, clock)
	offset, err := chromedp.Run(bctx, chromedp.Evaluate[int](`new Date().getTimezoneOffset()`))
	require.NoError(t, err)
	require.NotZero(t, offset, "the browser's local time is not UTC, so a local clock would differ")

	// The task page: the name and the state first, then the form; each count labelled.
	navigate(t, bctx, srv.URL+"/tasks/crm/sync")
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#limit-form`))))
	order := func() bool {
		first, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(function () {
			var h1 = document.querySelector("h1"), summary = document.querySelector("dl.summary"), form = document.getElementById("limit-form");
			var before = function (a, b) { return !!(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING); };
			return before(h1, summary) && before(summary, form) && before(form, document.getElementById("slots"));
		})()`))
		require.NoError(t, err)
		return first
	}
	require.True(t, order(), "the task's name and state come before the operator's form")
	waitText(t, bctx, `#waiting`, "0 starts")
	waitText(t, bctx, `#queued`, "2 waiting to start")
	labels, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`["waiting", "queued"].map(function (id) {
		return document.getElementById(id).previousElementSibling.textContent; })`))
	require.NoError(t, err)
	require.Equal(t, []string{"Waiting for a slot", "Submissions queued"}, labels)
	keys := text(t, bctx, `#keys thead`)
	require.Contains(t, keys, "Waiting for a slot\tSubmissions queued")
	waitText(t, bctx, `tr.key-row[data-key="globex"] .key-waiting`, "0")
	waitText(t, bctx, `tr.key-row[data-key="globex"] .key-queued`, "2")
	summary := text(t, bctx, `dl.summary`)
	require.Contains(t, summary, "blocked 1d")
	require.NotContains(t, summary, "denied")
	require.Contains(t, text(t, bctx, `#rate-totals`), "1 blocked")

	// The summary's slots in use are the slots table's live holders, and both refresh.
	sums, err := chromedp.Run(bctx, chromedp.Evaluate[[]int](`(function () {
		var p = document.querySelector("dl.summary progress.slots");
		return [p.value, document.querySelectorAll("#slots .status.in_progress").length];
	})()`))
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, sums)
	_, err = client.Submit(ctx, "crm", "sync", &taskling.SubmitOptions{Key: "globex"})
	require.NoError(t, err)
	waitText(t, bctx, `#queued`, "3 waiting to start") // by the auto-refresh
	require.True(t, order(), "the auto-refresh keeps the summary above the form")

	// The executions table: reference, key, cost and reason each in its column; why ids jump.
	head := text(t, bctx, `#executions thead`)
	require.Contains(t, head, "Reference\tKey\tCost\tReason / outcome")
	row := `#execution-` + strconv.FormatInt(holder.ID(), 10)
	require.Equal(t, "sync-1", text(t, bctx, row+` .reference`))
	require.Equal(t, "acme", text(t, bctx, row+` .key`))
	require.Equal(t, "1", text(t, bctx, row+` .cost`))
	blocked, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`(function () {
		var r = document.querySelector("#executions tbody tr .status.blocked").closest("tr");
		return [r.querySelector(".status").textContent, r.querySelector(".reference").textContent, r.querySelector(".outcome").textContent.trim()];
	})()`))
	require.NoError(t, err)
	require.Equal(t, "blocked", blocked[0])
	require.Equal(t, "sync-2", blocked[1], "the reference alone: the reason has its own column")
	require.NotEmpty(t, blocked[2], "the reason")
	require.Contains(t, text(t, bctx, `#execution-ids`), "ids jump and are not in start order")

	// A critical section's page says whose it is.
	navigate(t, bctx, srv.URL+"/tasks/crm/"+url.PathEscape("import [critical section]"))
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#internal-task`))))
	require.Contains(t, text(t, bctx, `#internal-task`), "The critical section of crm/import")

	// The page of the execution that ran the submission: its key, its cost, its submission.
	navigate(t, bctx, srv.URL+"/executions/"+strconv.FormatInt(attempt, 10))
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#execution-submission`))))
	require.Equal(t, "#"+strconv.FormatInt(sub, 10)+", attempt 1", text(t, bctx, `#execution-submission`))
	href, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("#execution-submission a").getAttribute("href")`))
	require.NoError(t, err)
	require.Equal(t, "../submissions/"+strconv.FormatInt(sub, 10), href)
	require.Equal(t, "— (no key)", text(t, bctx, `#execution-key`))
	require.Equal(t, "1", text(t, bctx, `#execution-cost`))
}

// signIn opens the dashboard at url, signs in with token and waits for the tasks list.
func signIn(t *testing.T, bctx context.Context, url string) {
	t.Helper()
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`table.tasks`)),
	))
}

// TestPagesOfAnotherSiteCannotSignInOrOut is issue 40 item 6: a page of another origin that
// auto-submitted a form to /login signed the victim's Chromium in as the attacker (a top-level
// navigation may set even a SameSite=Strict cookie), and one posting to /logout signed it out.
// Both are refused now, from another site (evil.example, resolved to a local attacker server) and
// from another port of the same host (the same site, another origin).
func TestPagesOfAnotherSiteCannotSignInOrOut(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Defaults: fast})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	file := filepath.Join(t.TempDir(), "principals.toml")
	mallory, err := principals.Add(file, "mallory", principals.RoleRead)
	require.NoError(t, err)
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, PrincipalsFile: file, RefreshInterval: time.Minute})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	// The attacker's pages: each auto-submits a form to the dashboard.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><title>free prizes</title>
<form method="post" action="` + srv.URL + r.URL.Path + `"><input type="hidden" name="token" value="` + mallory + `"></form>
<script>document.forms[0].submit()</script>`))
	}))
	t.Cleanup(evil.Close)
	evilPort := evil.URL[strings.LastIndexByte(evil.URL, ':'):]
	bctx := openBrowser(t, browser, 2*time.Minute,
		chromedp.Flag("host-resolver-rules", "MAP evil.example "+strings.TrimPrefix(evil.URL, "http://")))
	attackers := []string{"http://evil.example" + evilPort, evil.URL}

	// landed waits for the dashboard's page the attack leads to, and says what it shows: the
	// problem of the sign-in page, or who is signed in.
	landed := func(attack string) (problem, principal string) {
		t.Helper()
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(attack)))
		var state struct{ Problem, Principal string }
		require.Eventually(t, func() bool {
			v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.origin === "`+srv.URL+`" && document.readyState === "complete" ?
				JSON.stringify({Problem: document.getElementById("login-problem")?.textContent ?? "", Principal: document.getElementById("principal")?.textContent ?? ""}) : ""`))
			return err == nil && v != "" && json.Unmarshal([]byte(v), &state) == nil
		}, 20*time.Second, 50*time.Millisecond, "%s leads to the dashboard", attack)
		return state.Problem, state.Principal
	}
	signedInAs := func() string {
		t.Helper()
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitReady(chromedp.CSS(`body`))))
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("principal")?.textContent ?? ""`))
		require.NoError(t, err)
		return v
	}

	for _, from := range attackers {
		problem, principal := landed(from + "/login")
		require.Empty(t, principal, "from %s", from)
		require.Empty(t, signedInAs(), "from %s: signed in as the attacker", from)
		require.Contains(t, problem, "sent by a page of another site", "from %s", from)
	}
	var sessions int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM taskling.api_session`).Scan(&sessions))
	require.Zero(t, sessions)

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-token`), token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#sign-out`)),
	))
	require.Equal(t, "token", signedInAs())
	for _, from := range attackers {
		problem, _ := landed(from + "/logout")
		require.Equal(t, "token", signedInAs(), "from %s: signed out", from)
		require.Contains(t, problem, "you are still signed in", "from %s", from)
	}
	// The dashboard's own button still signs out.
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#sign-out`)), chromedp.WaitVisible(chromedp.CSS(`#login-form`))))
	require.Empty(t, signedInAs())
}

// Package browser tests the dashboard in a real browser: headless Chromium driven by chromedp. It
// lives in the integration_test module so that the root module's tests need only Go and
// PostgreSQL.
package browser_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/internal/pgtest"
	"github.com/taskling-go/taskling/internal/testutil"
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

	pool, _ := pgtest.NewDB(t)
	s := fast
	s.ConcurrencyLimit = 1
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker-1", Defaults: s})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, RefreshInterval: 250 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

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
	go func() {
		defer close(workDone)
		for done := int64(0); done <= 1000 && workCtx.Err() == nil; done += 20 {
			_ = running.SetProgress(workCtx, done, 1000)
			select {
			case <-workCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stopWork(); <-workDone })

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
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
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 30*time.Second)
	defer cancelTimeout()

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
	row, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`table.tasks tbody`)))
	require.NoError(t, err)
	require.Contains(t, row, "billing/export")
	require.Contains(t, row, "1 / 1")
	require.Contains(t, row, "1 waiting", "the queue for the slot shows")
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
	waiting, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#waiting`)))
	require.NoError(t, err)
	require.Contains(t, waiting, "1 (the oldest since ", "the task page shows the queue")
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

	// A fresh load of the task page shows the new limit, its source and the new holder.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/tasks/billing/export"),
		chromedp.WaitVisible(chromedp.CSS(`#execution-`+strconv.FormatInt(second.ID(), 10))),
	))
	summary, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`dl.summary`)))
	require.NoError(t, err)
	require.Contains(t, summary, "override")
	require.Contains(t, summary, "2 / 3")
	screenshot(t, bctx, "dashboard.png")
	t.Logf("browser test ran in %s", time.Since(began).Round(10*time.Millisecond))
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

package main

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
)

// watching is a watch command running in the background.
type watching struct {
	out, errOut testutil.SyncBuffer
	code        chan int
}

func startWatch(url string, args ...string) *watching {
	w := &watching{code: make(chan int, 1)}
	getenv := func(k string) string {
		if k == "TASKLING_DATABASE_URL" {
			return url
		}
		return ""
	}
	go func() { w.code <- run(context.Background(), args, &w.out, &w.errOut, getenv) }()
	return w
}

func (w *watching) saw(t *testing.T, line string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), line+"\n") }, 15*time.Second, 10*time.Millisecond,
		"watch printed %q; it printed:\n%s%s", line, w.out.String(), w.errOut.String())
}

func (w *watching) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-w.code:
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("watch did not end; it printed:\n%s", w.out.String())
	}
	return -1
}

// TestSubmissionsWatchFollowsItToTheEnd: without a terminal, watch prints a line per state —
// waiting with its position, running with its progress at each whole percent, completed — and
// exits 0; a dead submission exits 1 naming its last error; an unknown one 2.
func TestSubmissionsWatchFollowsItToTheEnd(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker", CleanupInterval: -1})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx := context.Background()
	ahead, err := client.Submit(ctx, "billing", "report", &taskling.SubmitOptions{ReferenceValue: "ahead"})
	require.NoError(t, err)
	id, err := client.Submit(ctx, "billing", "report", &taskling.SubmitOptions{Header: map[string]bool{"progress": true}})
	require.NoError(t, err)
	w := startWatch(url, "submissions", "watch", strconv.FormatInt(id, 10), "--interval", "100ms")
	w.saw(t, "waiting (position 2)")
	_, err = client.CancelSubmission(ctx, ahead, "")
	require.NoError(t, err)
	w.saw(t, "waiting (position 1)")

	step := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() {
		worked <- client.Work(wctx, "billing", "report", func(ctx context.Context, e *taskling.Execution) error {
			var h struct{ Progress, Fail bool }
			if err := e.Header(&h); err != nil {
				return err
			}
			if h.Fail {
				return errors.New("the file is empty")
			}
			for _, done := range []int64{0, 410} {
				if err := e.SetProgress(ctx, done, 1000); err != nil {
					return err
				}
				<-step
			}
			return e.SetProgress(ctx, 1000, 1000)
		}, nil)
	}()
	w.saw(t, "running 0 % (0 of 1 000 items)")
	step <- struct{}{}
	w.saw(t, "running 41 % (410 of 1 000 items)")
	step <- struct{}{}
	require.Equal(t, watchCompleted, w.exit(t))
	require.True(t, strings.HasSuffix(w.out.String(), "completed\n"), w.out.String())
	require.NotContains(t, w.out.String(), "[#", "no bar without a terminal")

	dead, err := client.Submit(ctx, "billing", "report", &taskling.SubmitOptions{Header: map[string]bool{"fail": true}, MaxAttempts: 1})
	require.NoError(t, err)
	w = startWatch(url, "submissions", "watch", strconv.FormatInt(dead, 10), "--interval", "100ms")
	require.Equal(t, watchFailed, w.exit(t))
	require.Contains(t, w.errOut.String(), "is dead: ")
	require.Contains(t, w.errOut.String(), "the file is empty")
	stop()
	require.NoError(t, <-worked)

	w = startWatch(url, "submissions", "watch", "999999")
	require.Equal(t, watchNotFound, w.exit(t))
}

// TestExecutionsWatchExitsByOutcome: a completed execution exits 0, a failed one 1.
func TestExecutionsWatchExitsByOutcome(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker", CleanupInterval: -1})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx := context.Background()
	e, err := client.StartExecution(ctx, "billing", "export", nil)
	require.NoError(t, err)
	require.NoError(t, e.SetProgress(ctx, 5, 10))
	w := startWatch(url, "executions", "watch", strconv.FormatInt(e.ID(), 10), "--interval", "100ms")
	w.saw(t, "running 50 % (5 of 10 items)")
	require.NoError(t, e.Complete(ctx))
	require.Equal(t, watchCompleted, w.exit(t))

	var failed int64
	_ = client.Run(ctx, "billing", "export", func(_ context.Context, e *taskling.Execution) error {
		failed = e.ID()
		return errors.New("disk full")
	}, nil)
	w = startWatch(url, "executions", "watch", strconv.FormatInt(failed, 10))
	require.Equal(t, watchFailed, w.exit(t))
	require.Contains(t, w.errOut.String(), "is failed: disk full")
}

// TestWatchExitsThreeWhenTheConnectionIsLost: a watch whose database goes away (a proxy in
// front of it closes) exits 3 once its reads have failed for --timeout.
func TestWatchExitsThreeWhenTheConnectionIsLost(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker", CleanupInterval: -1})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	id, err := client.Submit(context.Background(), "billing", "report", nil)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	p := newProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	proxied := strings.Replace(url, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), p.addr(), 1)
	w := startWatch(proxied, "submissions", "watch", strconv.FormatInt(id, 10), "--interval", "100ms", "--timeout", "1s")
	w.saw(t, "waiting (position 1)")
	p.close()
	require.Equal(t, watchLost, w.exit(t))
	require.Contains(t, w.errOut.String(), "connection lost")
}

// proxy forwards TCP connections to a server until closed, then closes them all.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestWatchViewRedrawsOneLineOnATerminal: on a terminal the line is redrawn in place (carriage
// return, erase line), its earlier phases joined by arrows, with a bar; the end adds a newline.
func TestWatchViewRedrawsOneLineOnATerminal(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	v := &watchView{w: &b, terminal: true}
	v.show(submissionState(taskling.Submission{Status: taskling.SubmissionWaiting, Position: 3}))
	v.show(submissionState(taskling.Submission{Status: taskling.SubmissionInProgress, ItemsDone: 410, ItemsTotal: 1000}))
	v.show(submissionState(taskling.Submission{Status: taskling.SubmissionCompleted}))
	frames := strings.Split(b.String(), "\r\x1b[2K")
	require.Equal(t, []string{"", "waiting (position 3)",
		"waiting (position 3) → running 41 % (410 of 1 000 items) [########------------]",
		"waiting (position 3) → running 41 % (410 of 1 000 items) → completed\n"}, frames)
	require.Equal(t, "12 345 678", groupDigits(12345678))
	require.Equal(t, "999", groupDigits(999))
}

// TestWatchEndsWithTheProgressTheRunEndedWith is issue 40: a run that completed between two
// reads stayed at the last read's 95 % on the terminal's last line. The running phase now shows
// the progress the run ended with, on a terminal and off one.
func TestWatchEndsWithTheProgressTheRunEndedWith(t *testing.T) {
	t.Parallel()
	var term, plain strings.Builder
	tv, pv := &watchView{w: &term, terminal: true}, &watchView{w: &plain}
	for _, x := range []taskling.ExecutionDetail{
		{ExecutionInfo: taskling.ExecutionInfo{Status: taskling.StatusInProgress, ItemsDone: 950, ItemsTotal: 1000}},
		{ExecutionInfo: taskling.ExecutionInfo{Status: taskling.StatusCompleted, ItemsDone: 1000, ItemsTotal: 1000}},
	} {
		tv.show(executionState(x))
		pv.show(executionState(x))
	}
	frames := strings.Split(term.String(), "\r\x1b[2K")
	require.Equal(t, "running 100 % (1 000 of 1 000 items) → completed\n", frames[len(frames)-1])
	require.Equal(t, "running 95 % (950 of 1 000 items)\nrunning 100 % (1 000 of 1 000 items)\ncompleted\n", plain.String())

	// A run that failed shows where it stopped; one without progress shows none.
	var failed strings.Builder
	fv := &watchView{w: &failed, terminal: true}
	fv.show(running(350, 1000))
	fv.show(executionState(taskling.ExecutionDetail{ExecutionInfo: taskling.ExecutionInfo{Status: taskling.StatusFailed, ItemsDone: 400, ItemsTotal: 1000}}))
	require.True(t, strings.HasSuffix(failed.String(), "\r\x1b[2Krunning 40 % (400 of 1 000 items) → failed\n"), failed.String())
	var bare strings.Builder
	bv := &watchView{w: &bare, terminal: true}
	bv.show(running(0, 0))
	bv.show(executionState(taskling.ExecutionDetail{ExecutionInfo: taskling.ExecutionInfo{Status: taskling.StatusCompleted}}))
	require.True(t, strings.HasSuffix(bare.String(), "\r\x1b[2Krunning → completed\n"), bare.String())
}

// TestCleanupProgressSumsEveryTask: a cleanup running for more than a second shows the rows
// deleted over every task so far, their rate and the task in progress, at most once a second.
func TestCleanupProgressSumsEveryTask(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	p := &cleanupProgress{w: &b, began: time.Now().Add(-2 * time.Second), rows: map[string]int64{}}
	p.batch("billing", "export", taskling.CleanupCounts{Completed: 1000})
	p.batch("billing", "import", taskling.CleanupCounts{Completed: 400, Failed: 100}) // within the second: not shown
	require.Regexp(t, `^cleanup: 1 000 rows deleted in 2s \(\d+ rows/s\); 1 tasks so far, now billing/export\n$`, b.String())
	p.last = time.Now().Add(-time.Second)
	p.batch("billing", "import", taskling.CleanupCounts{Completed: 1000, Failed: 1500})
	require.Contains(t, b.String(), "cleanup: 3 500 rows deleted in 2s")
	require.Contains(t, b.String(), "2 tasks so far, now billing/import\n")
	quick := &cleanupProgress{w: &b, began: time.Now(), rows: map[string]int64{}}
	before := b.String()
	quick.batch("billing", "export", taskling.CleanupCounts{Completed: 5})
	require.Equal(t, before, b.String(), "a cleanup shorter than a second shows nothing")
}

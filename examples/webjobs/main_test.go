package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
)

// TestMain lets the test run the program as a process without building it: the test binary
// started with WEBJOBS_RUN_MAIN=1 is the program (and so are the workers it starts, which
// inherit the variable). Under -race, so is the program.
func TestMain(m *testing.M) {
	if os.Getenv("WEBJOBS_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSecondUploadWaitsWhileFirstRuns runs the program as users do (web server and two worker
// processes, on a fresh database): while the first upload's job runs, the second's waits at
// position 1 (the task's limit is 1); both then complete, every line counted; bad requests get
// clear errors; SIGTERM stops it all cleanly.
func TestSecondUploadWaitsWhileFirstRuns(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-addr", "127.0.0.1:0", "-line-delay", "20ms", "-max-upload", "4096", "-stdin-lifeline")
	dbURL := pgtest.DatabaseURL(t)
	cmd.Env = append(os.Environ(), "WEBJOBS_RUN_MAIN=1", "TASKLING_DATABASE_URL="+dbURL)
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if _, err := cmd.StdinPipe(); err != nil { // the lifeline: the app stops if this test dies
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
		}
		if t.Failed() {
			t.Logf("program output:\n%s", out.String())
		}
	}()

	base := waitForURL(t, &out, exited)
	app := &appClient{t: t, base: base}

	// The workers' command lines, as ps shows them (issue 40: they held the database URL,
	// password and all).
	lines, err := testutil.DescendantCommandLines(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	testutil.RequireNoDatabaseURL(t, dbURL, lines)
	if n := strings.Count(strings.Join(lines, "\n"), " -role worker "); n != workers {
		t.Errorf("saw %d worker processes; want %d:\n%s", n, workers, strings.Join(lines, "\n"))
	}

	// Bad requests.
	app.expectUploadError("empty.csv", "", http.StatusBadRequest, "the file is empty")
	app.expectUploadError("big.csv", strings.Repeat("x,y\n", 1025), http.StatusRequestEntityTooLarge, "file too large: at most 4 KiB")
	app.expectUploadError("bin.csv", "a\x00b\n", http.StatusBadRequest, "not a text file")
	app.expectUploadError("", "a\n", http.StatusBadRequest, "no file")
	for path, want := range map[string]int{"/uploads/abc/status": 400, "/uploads/0/status": 400, "/uploads/999/status": 404, "/uploads/999": 404} {
		if code, body := app.get(path); code != want {
			t.Errorf("GET %s: %d %s; want %d", path, code, body, want)
		}
	}

	// The first job runs; the second, uploaded meanwhile, waits at position 1 until it is done.
	const linesA, linesB = 60, 30
	a := app.upload("a.csv", csv(linesA))
	for s := app.status(a); s.Status != taskling.SubmissionInProgress; s = app.status(a) {
		if s.Final || time.Now().After(deadline(ctx)) {
			t.Fatalf("upload a never started: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := app.upload("b.csv", csv(linesB))
	var sawWaiting, sawProgress bool
	for {
		// b first: a runs from before b's upload, so a running after b was seen waiting means
		// a ran while b waited.
		sb, sa := app.status(b), app.status(a)
		if sa.Status == taskling.SubmissionInProgress {
			switch sb.Status {
			case taskling.SubmissionWaiting:
				if sb.Position != 1 || !strings.HasPrefix(sb.Message, "Waiting for job to start… (position 1)") {
					t.Fatalf("b waits as %+v; want position 1", sb)
				}
				sawWaiting = true
			case taskling.SubmissionInProgress:
				t.Fatalf("both jobs run at once, with a limit of 1: %+v and %+v", sa, sb)
			}
			if sa.ItemsTotal == linesA && sa.ItemsDone > 0 && sa.ItemsDone < linesA && strings.HasPrefix(sa.Message, "Running, ") {
				sawProgress = true
			}
		}
		if sa.Final && sb.Final {
			for _, s := range []status{sa, sb} {
				if s.Status != taskling.SubmissionCompleted || s.Attempts != 1 {
					t.Errorf("upload %d ended as %+v; want completed at its first attempt", s.UploadID, s)
				}
			}
			if sa.ItemsDone != linesA || sa.ItemsTotal != linesA || sb.ItemsDone != linesB || sb.ItemsTotal != linesB {
				t.Errorf("items done/total: a %d/%d, b %d/%d; want %d/%d and %d/%d",
					sa.ItemsDone, sa.ItemsTotal, sb.ItemsDone, sb.ItemsTotal, linesA, linesA, linesB, linesB)
			}
			break
		}
		if time.Now().After(deadline(ctx)) {
			t.Fatalf("jobs not done in time: %+v, %+v", sa, sb)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawWaiting {
		t.Error("never saw b waiting at position 1 while a ran")
	}
	if !sawProgress {
		t.Error("never saw a's progress between 0 and all of its lines")
	}
	if code, body := app.get(fmt.Sprintf("/uploads/%d", b)); code != 200 || !strings.Contains(body, "Complete (30 items)") {
		t.Errorf("progress page of b: %d\n%s", code, body)
	}

	// SIGTERM stops the web server and the workers; everything exits cleanly.
	stopped = true
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("exit: %v", err)
	}
	for _, want := range []string{"worker-1: stopped", "worker-2: stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "DATA RACE") {
		t.Error("the race detector found a race")
	}
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d.Add(-10 * time.Second) // time left to stop the program
}

// waitForURL returns the web server's URL, once the program has printed it.
func waitForURL(t *testing.T, out *testutil.SyncBuffer, exited <-chan error) string {
	t.Helper()
	re := regexp.MustCompile(`webjobs: listening on (http://\S+)`)
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-exited:
			t.Fatalf("the program exited before serving: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("the program did not start serving in 30 s")
	return ""
}

func csv(lines int) string {
	var b strings.Builder
	b.WriteString("id,name\n")
	for i := 1; i < lines; i++ {
		fmt.Fprintf(&b, "%d,item %d\n", i, i)
	}
	return b.String()
}

type appClient struct {
	t    *testing.T
	base string
}

var noRedirects = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// post uploads content as name (no file part if name is "").
func (c *appClient) post(name, content string) *http.Response {
	c.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	field := "file"
	if name == "" {
		field, name = "other", "other.csv"
	}
	fw, err := mw.CreateFormFile(field, name)
	if err == nil {
		_, err = io.WriteString(fw, content)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := noRedirects.Post(c.base+"/uploads", mw.FormDataContentType(), &body)
	if err != nil {
		c.t.Fatalf("upload %s: %v", name, err)
	}
	return resp
}

// upload uploads content and returns the upload's id, from the redirect to its progress page.
func (c *appClient) upload(name, content string) int64 {
	c.t.Helper()
	resp := c.post(name, content)
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	loc := resp.Header.Get("Location")
	id, err := strconv.ParseInt(strings.TrimPrefix(loc, "/uploads/"), 10, 64)
	if resp.StatusCode != http.StatusSeeOther || err != nil {
		c.t.Fatalf("upload %s: %s, Location %q; want 303 to /uploads/<id>\n%s", name, resp.Status, loc, msg)
	}
	return id
}

func (c *appClient) expectUploadError(name, content string, code int, want string) {
	c.t.Helper()
	resp := c.post(name, content)
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != code || !strings.Contains(string(msg), want) {
		c.t.Errorf("upload %q: %s %q; want %d %q", name, resp.Status, msg, code, want)
	}
}

func (c *appClient) get(path string) (int, string) {
	c.t.Helper()
	resp, err := noRedirects.Get(c.base + path)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// status is what the progress page polls.
func (c *appClient) status(id int64) status {
	c.t.Helper()
	path := fmt.Sprintf("/uploads/%d/status", id)
	code, body := c.get(path)
	var s status
	if err := json.Unmarshal([]byte(body), &s); code != http.StatusOK || err != nil {
		c.t.Fatalf("GET %s: %d %s (%v)", path, code, body, err)
	}
	return s
}

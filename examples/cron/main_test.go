package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

// TestKillingTheRunningHostHandsTheNextInstantToAnother is issue 15 item 3: the example killed a
// host that was not running the job, so the kill showed nothing. It now kills the host running the
// job, in the middle of its run; that run is dead and the next instant runs elsewhere, once.
func TestKillingTheRunningHostHandsTheNextInstantToAnother(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "cron")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := pgtest.DatabaseURL(t)
	cmd := exec.CommandContext(ctx, bin, "-duration", "12s")
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+dbURL)
	var buf testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The scheduler processes' command lines, as ps shows them while they run (issue 40: they
	// held the database URL, password and all).
	seen := map[string]bool{}
	var err error
watch:
	for {
		lines, perr := testutil.DescendantCommandLines(cmd.Process.Pid)
		if perr != nil {
			t.Fatal(perr)
		}
		for _, l := range lines {
			seen[l] = true
		}
		select {
		case err = <-exited:
			break watch
		case <-time.After(100 * time.Millisecond):
		}
	}
	out := []byte(buf.String())
	if err != nil {
		t.Fatalf("cron: %v\n%s", err, out)
	}
	var commandLines []string
	for l := range seen {
		commandLines = append(commandLines, l)
	}
	testutil.RequireNoDatabaseURL(t, dbURL, commandLines)
	if schedulers := strings.Count(strings.Join(commandLines, "\n"), " -scheduler "); schedulers < 3 {
		t.Errorf("saw %d scheduler processes' command lines; want the 3 (and the restarted one):\n%s", schedulers, strings.Join(commandLines, "\n"))
	}
	for _, want := range []string{
		`(?m)^schedule event: registered "\*/3 \* \* \* \* \*" in Europe/London$`, // once "registered registered …"
		`-- kill -9 h\d, in the middle of its run for \d\d:\d\d:\d\d`,
		`\d\d:\d\d:\d\d  (h\d)  dead  <- killed mid-run`,
		`\d\d:\d\d:\d\d  h\d  completed  <- the next instant, taken by another host`,
		`== \d+ instants, \d+ executions, 0 duplicates`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	killed := regexp.MustCompile(`(h\d)  dead  <- killed`).FindSubmatch(out)
	next := regexp.MustCompile(`(h\d)  completed  <- the next instant`).FindSubmatch(out)
	if killed != nil && next != nil && string(killed[1]) == string(next[1]) {
		t.Errorf("the next instant ran on the killed host %s:\n%s", killed[1], out)
	}
}

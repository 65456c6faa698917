package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
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
	cmd := exec.CommandContext(ctx, bin, "-duration", "12s")
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+pgtest.DatabaseURL(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cron: %v\n%s", err, out)
	}
	for _, want := range []string{
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

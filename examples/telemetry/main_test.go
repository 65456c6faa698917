package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildOut  []byte
)

// build builds the example once, for every test (its directory goes with the test binary's).
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "telemetry-example")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "telemetry")
		buildOut, buildErr = exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build: %v\n%s", buildErr, buildOut)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// TestTheExamplePrintsTheJoinedTrace runs the example (a submitter process and a worker process,
// spans to stdout): its tree has the submitter's span at the root of one trace, the attempt's
// taskling.start under it (from the worker), the run under that and a span per block.
func TestTheExamplePrintsTheJoinedTrace(t *testing.T) {
	t.Parallel()
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+pgtest.DatabaseURL(t), "OTEL_EXPORTER_OTLP_ENDPOINT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("telemetry: %v\n%s", err, out)
	}
	want := `submitter: submission \d+ under trace ([0-9a-f]{32})\n\ntrace ([0-9a-f]{32})\n` +
		`POST /imports +submitter .*\n` +
		`  taskling\.start +worker .*task=imports/csv submission\.id=\d+ attempt=1 .*outcome=completed\n` +
		`    taskling\.run +worker .*\n` +
		`(      taskling\.block +worker .*\n){3}`
	m := regexp.MustCompile(want).FindSubmatch(out)
	if m == nil {
		t.Fatalf("output is not the joined trace %q:\n%s", want, out)
	}
	if string(m[1]) != string(m[2]) {
		t.Errorf("the tree's trace %s is not the submitter's %s", m[2], m[1])
	}
}

// TestTheExampleExportsOverOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set, both processes send their
// spans over OTLP/HTTP (to a stand-in collector here) instead of printing them.
func TestTheExampleExportsOverOTLP(t *testing.T) {
	t.Parallel()
	bin := build(t)
	var posts atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+pgtest.DatabaseURL(t), "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("telemetry: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`both sent their spans over OTLP: look up trace [0-9a-f]{32}`).Match(out) {
		t.Errorf("unexpected output:\n%s", out)
	}
	if n := posts.Load(); n < 2 {
		t.Errorf("the collector got %d OTLP posts; want one from each process at least", n)
	}
}

// TestChildrenGetTheDatabaseInTheirEnvironment is issue 40: the submitter and the worker got
// the database URL, password and all, on their command lines, which anyone on the machine can
// read (ps). It goes in their environment.
func TestChildrenGetTheDatabaseInTheirEnvironment(t *testing.T) {
	t.Parallel()
	const dbURL = "postgres://postgres:s3cret@127.0.0.1:5432/test_x?sslmode=disable"
	cmd := childCommand(context.Background(), "/bin/telemetry", dbURL, "-role", "submitter")
	testutil.RequireNoDatabaseURL(t, dbURL, []string{strings.Join(cmd.Args, " ")})
	if got := cmd.Env[len(cmd.Env)-1]; got != "TASKLING_DATABASE_URL="+dbURL { // the last value of a name wins
		t.Errorf("the child's environment ends with %q; want its database", got)
	}
}

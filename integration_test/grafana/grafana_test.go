// Package grafana tests docs/grafana-dashboard.json against a real Prometheus server (Debian's
// prometheus) scraping a running workload. It lives in the integration_test module so that the
// root module's tests need only Go and PostgreSQL.
package grafana_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskling-go/taskling/internal/devtools/freeport"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingprom"
)

func TestMain(m *testing.M) {
	// httptest's server closes idle keep-alive connections asynchronously.
	testutil.VerifyNoLeaks(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// dashboard is what the test reads of the dashboard: each panel's queries.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// prometheusBinary finds Debian's prometheus. Without it the test fails under CI (.ci/run
// installs it) and is skipped elsewhere.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the dashboard test needs prometheus on PATH (apt-get install prometheus; .ci/run installs it)")
	}
	t.Skip("no prometheus on PATH (apt-get install prometheus)")
	return ""
}

var metricName = regexp.MustCompile(`\btaskling_[a-z_]+`)

// TestGrafanaDashboardQueriesReturnData parses docs/grafana-dashboard.json, checks that every
// query names metrics the collector exports, and runs every panel's query on a Prometheus server
// that scrapes a workload of grants, waits, denials, failures, a dead holder reclaimed (its lease
// lost) and submissions: each query returns data.
func TestGrafanaDashboardQueriesReturnData(t *testing.T) {
	bin := prometheusBinary(t)
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana-dashboard.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	require.NotEmpty(t, d.Panels)
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
	}

	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "grafana-test", CleanupInterval: -1, Settings: taskling.StaticSettings{
		"demo/export": {ConcurrencyLimit: 2},
		// A holder that stops heartbeating is dead a second after its start, and cancels itself first.
		"demo/flaky": {ConcurrencyLimit: 1, DeathMode: taskling.DeathModeOverride, OverrideThreshold: time.Second},
	}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	metrics := tasklingprom.New(client)
	target := httptest.NewServer(promhttp.HandlerFor(metrics.Registry(), promhttp.HandlerOpts{}))
	t.Cleanup(target.Close)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	workload(ctx, t, client, &wg)
	api := startPrometheus(t, bin, strings.TrimPrefix(target.URL, "http://"))

	// Every panel's every query returns data once the workload has run a while (rates need two
	// scrapes of a series in their window).
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := strings.NewReplacer(`$task`, `.*`, `$__rate_interval`, `15s`).Replace(tg.Expr)
			var n int
			for {
				n, err = query(ctx, api, expr)
				require.NoError(t, err, "panel %q: %s", p.Title, expr)
				if n > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			require.Positive(t, n, "panel %q: %s returned no data", p.Title, expr)
		}
	}
	// By now the workload has made every metric it queries: each is one the collector exports.
	exported := exportedNames(t, metrics)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			names := metricName.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, names, "panel %q: %s names no taskling metric", p.Title, tg.Expr)
			for _, name := range names {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
				require.True(t, exported[base], "panel %q queries %s, which is not exported", p.Title, name)
			}
		}
	}
}

// exportedNames are the metric families the collector exports.
func exportedNames(t *testing.T, m *tasklingprom.Metrics) map[string]bool {
	t.Helper()
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	out := map[string]bool{}
	for _, f := range families {
		out[f.GetName()] = true
	}
	return out
}

// workload runs until ctx ends: two tasks' WaitForSlot runs over a limit of 2 (some fail), plain
// starts that are denied, submissions run by Work (some die, one is cancelled), and a holder in
// Override mode that dies (its lease lost) and is reclaimed.
func workload(ctx context.Context, t *testing.T, c *taskling.Client, wg *sync.WaitGroup) {
	t.Helper()
	limit := &taskling.StartOptions{WaitForSlot: true}
	for g := range 4 {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				_ = c.Run(ctx, "demo", "export", func(ctx context.Context, e *taskling.Execution) error {
					_ = e.SetProgress(ctx, 1, 2)
					time.Sleep(time.Duration(30+20*g) * time.Millisecond)
					if n%4 == 3 {
						return errors.New("bad row")
					}
					return nil
				}, limit)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			if e, err := c.StartExecution(ctx, "demo", "export", nil); err == nil {
				_ = e.Complete(ctx)
			}
			sleep(ctx, 100*time.Millisecond)
		}
	})
	wg.Go(func() {
		for n := 0; ctx.Err() == nil; n++ {
			id, err := c.Submit(ctx, "demo", "import", &taskling.SubmitOptions{Header: map[string]int{"n": n}, MaxAttempts: 1})
			if err == nil && n%7 == 6 {
				_, _ = c.CancelSubmission(ctx, id, "not needed")
			}
			sleep(ctx, 150*time.Millisecond)
		}
	})
	wg.Go(func() {
		_ = c.Work(ctx, "demo", "import", func(ctx context.Context, e *taskling.Execution) error {
			var h struct{ N int }
			_ = e.Header(&h)
			time.Sleep(100 * time.Millisecond)
			if h.N%5 == 4 {
				return errors.New("empty file")
			}
			return nil
		}, nil)
	})
	wg.Go(func() { deadHolders(ctx, c) })
}

// deadHolders starts, every few seconds, a holder in Override mode that never completes: its
// lease is lost after about a second, and the next start reclaims its slot.
func deadHolders(ctx context.Context, c *taskling.Client) {
	for ctx.Err() == nil {
		dead, err := c.StartExecution(ctx, "demo", "flaky", nil)
		sleep(ctx, 1500*time.Millisecond)
		if e, err := c.StartExecution(ctx, "demo", "flaky", nil); err == nil {
			_ = e.Complete(context.WithoutCancel(ctx))
		}
		if err == nil {
			_ = dead.Complete(context.WithoutCancel(ctx)) // ErrLeaseLost
		}
		sleep(ctx, 2*time.Second)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// startPrometheus runs prometheus on a free port with a temporary configuration and data
// directory, scraping target every second, and returns its URL once it is ready.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: taskling
    static_configs:
      - targets: [%q]
`, target), 0o600))
	port, err := freeport.Get()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var out testutil.SyncBuffer
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus:\n%s", out.String())
		}
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "prometheus is not ready:\n%s", &out)
	return base
}

// query runs an instant query and returns how many series it returned with a value (not NaN:
// a quantile of a histogram without observations in its window).
func query(ctx context.Context, api, expr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s", r.Error)
	}
	n := 0
	for _, res := range r.Data.Result {
		if v, ok := res.Value[1].(string); ok && v != "NaN" {
			n++
		}
	}
	return n, nil
}

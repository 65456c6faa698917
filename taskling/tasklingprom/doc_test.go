package tasklingprom

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/settingsfile"
)

// documented reads the tables of docs/metrics.md's section named heading: each row's metric as
// "name{label,…}" and its type.
func documented(t *testing.T, heading string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "\n## "+heading+"\n")
	require.True(t, ok, "docs/metrics.md has no section %q", heading)
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)(\\{[a-z_,]*\\})?` \\| (counter|gauge|histogram) \\|")
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		labels := strings.Trim(m[2], "{}")
		out[m[1]+"{"+labels+"}"] = m[3]
	}
	require.NotEmpty(t, out, "no metric rows in section %q", heading)
	return out
}

// exported gathers g: each metric family as "name{label,…}" (labels sorted as in the docs'
// order-insensitive comparison) and its type.
func exported(t *testing.T, g prometheus.Gatherer) map[string]string {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	out := map[string]string{}
	for _, f := range families {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		out[f.GetName()+"{"+strings.Join(sortedKeys(labels), ",")+"}"] = map[dto.MetricType]string{
			dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}[f.GetType()]
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// normalize sorts the labels of each documented metric.
func normalize(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		name, labels, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		ls := map[string]bool{}
		for _, l := range strings.Split(labels, ",") {
			if l != "" {
				ls[l] = true
			}
		}
		out[name+"{"+strings.Join(sortedKeys(ls), ",")+"}"] = v
	}
	return out
}

// TestMetricsPageListsWhatIsExported: docs/metrics.md lists every metric the collector exports,
// with its type and labels, and nothing else; and so for the settings file's collector. Every
// hook is fed once and the database holds a task, its critical section, a block and a submission,
// so that every metric has a series.
func TestMetricsPageListsWhatIsExported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host", CleanupInterval: -1})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m := New(client)
	require.NoError(t, client.Run(ctx, "app", "task", func(ctx context.Context, e *taskling.Execution) error {
		cs, err := e.CriticalSection(ctx, 0) // its task is marked by taskling_critical_section
		if err != nil {
			return err
		}
		if err := cs.Release(ctx); err != nil {
			return err
		}
		_, err = e.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
		return err
	}, nil))
	_, err = client.Submit(ctx, "app", "task", nil)
	require.NoError(t, err)
	rated, err := taskling.NewClient(pool, &taskling.Config{HostName: "rated", CleanupInterval: -1,
		Defaults: taskling.TaskSettings{Rate: taskling.Rate{Count: 1, Per: time.Hour}}})
	require.NoError(t, err)
	t.Cleanup(rated.Close)
	require.NoError(t, rated.Run(ctx, "app", "rated", func(context.Context, *taskling.Execution) error { return nil }, nil))
	h := m.hooks
	h.AcquireDone("app", "task", time.Millisecond)
	h.Granted("app", "task")
	h.Denied("app", "task", taskling.DenyLimit)
	h.Reclaimed("app", "task", 1)
	h.LeaseLost("app", "task")
	h.HeartbeatFailed("app", "task")
	h.Cleaned("app", "task", taskling.CleanupCounts{Completed: 1})
	h.Waited("app", "task", time.Second)
	h.SubmissionWaited("app", "task", time.Second)
	h.Ended("app", "task", taskling.OutcomeCompleted, time.Second)
	require.Equal(t, normalize(documented(t, "Prometheus")), exported(t, m.Registry()))

	file := filepath.Join(t.TempDir(), "taskling.toml")
	require.NoError(t, os.WriteFile(file, []byte("[defaults]\nconcurrency_limit = 2\n"), 0o600))
	src, err := settingsfile.Open(ctx, file, nil)
	require.NoError(t, err)
	t.Cleanup(src.Close)
	reg := prometheus.NewRegistry()
	reg.MustRegister(src.Collector())
	require.Equal(t, normalize(documented(t, "The settings file's metrics")), exported(t, reg))
}

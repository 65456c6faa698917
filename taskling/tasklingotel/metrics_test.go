package tasklingotel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingotel"
)

// documentedInstruments reads docs/metrics.md's table of instruments: name → "type attr,attr".
func documentedInstruments(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "\n## OpenTelemetry instruments\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\|")
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		var attrs []string
		for _, a := range strings.Split(m[3], ",") {
			attrs = append(attrs, strings.Trim(strings.TrimSpace(a), "`"))
		}
		sort.Strings(attrs)
		out[m[1]] = m[2] + " " + strings.Join(attrs, ",")
	}
	require.NotEmpty(t, out)
	return out
}

// collected reads what the meter exported: name → "type attr,attr" (every attribute key seen).
func collected(t *testing.T, b *bundle) map[string]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, b.reader.Collect(context.Background(), &rm))
	out := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			keys := map[string]bool{}
			kind := ""
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				kind = "counter"
				for _, p := range d.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						keys[string(kv.Key)] = true
					}
				}
			case metricdata.Gauge[int64]:
				kind = "gauge"
				for _, p := range d.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						keys[string(kv.Key)] = true
					}
				}
			case metricdata.Gauge[float64]:
				kind = "gauge"
				for _, p := range d.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						keys[string(kv.Key)] = true
					}
				}
			case metricdata.Histogram[float64]:
				kind = "histogram"
				for _, p := range d.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						keys[string(kv.Key)] = true
					}
				}
			}
			var attrs []string
			for k := range keys {
				attrs = append(attrs, k)
			}
			sort.Strings(attrs)
			out[m.Name] = kind + " " + strings.Join(attrs, ",")
		}
	}
	return out
}

// TestMetricsPageListsEveryInstrument: docs/metrics.md lists every instrument the meter exports,
// with its type and attributes, and nothing else (MessagingConventions on, every hook fed, a
// submission run by Work and one failing).
func TestMetricsPageListsEveryInstrument(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &tasklingotel.Options{MessagingConventions: true})
	for _, fail := range []bool{false, true} {
		id, err := b.client.Submit(b.ctx, "app", "task", &taskling.SubmitOptions{MaxAttempts: 1})
		require.NoError(t, err)
		ctx, stop := context.WithCancel(b.ctx)
		done := make(chan error, 1)
		go func() {
			done <- b.client.Work(ctx, "app", "task", func(context.Context, *taskling.Execution) error {
				if fail {
					return errors.New("bad file")
				}
				return nil
			}, nil)
		}()
		require.Eventually(t, func() bool {
			s, err := b.client.Submission(b.ctx, id)
			return err == nil && (s.Status == taskling.SubmissionCompleted || s.Status == taskling.SubmissionDead)
		}, 20*time.Second, 10*time.Millisecond)
		stop()
		require.NoError(t, <-done)
	}
	h := b.tel.HooksForTest()
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
	require.Equal(t, documentedInstruments(t), collected(t, b))
}

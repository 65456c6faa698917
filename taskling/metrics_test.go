package taskling_test

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// metricValue gathers the client's registry and returns the value of the named metric whose
// labels include want (a counter, gauge or histogram's sample count); -1 when absent.
func metricValue(t *testing.T, c *taskling.Client, name string, want map[string]string) float64 {
	t.Helper()
	families, err := c.Metrics().Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			return value(m)
		}
	}
	return -1
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func TestMetricsFollowGrantsDenialsAndReclaims(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	task := map[string]string{"task": "app/task"}
	get := func(name string, labels map[string]string) float64 { return metricValue(t, b.client, name, labels) }

	require.Equal(t, -1.0, get("taskling_grants_total", task), "nothing started yet")

	first := b.start(t, nil)
	require.Equal(t, 1.0, get("taskling_grants_total", task))
	require.Equal(t, 1.0, get("taskling_slots_in_use", task))
	require.Equal(t, 1.0, get("taskling_slots_limit", task))

	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	require.Equal(t, 1.0, get("taskling_denials_total", map[string]string{"task": "app/task", "reason": "limit"}))

	// The holder freezes: it cancels itself (lease lost), then its slot is reclaimed.
	first.StopHeartbeatForTest()
	<-first.Context().Done()
	require.Equal(t, 1.0, get("taskling_lease_losses_total", task))
	require.Eventually(t, func() bool { return get("taskling_slots_in_use", task) == 0 }, 5*time.Second, 50*time.Millisecond,
		"the frozen holder is judged dead on the DB clock")
	b.start(t, nil)
	require.Equal(t, 1.0, get("taskling_reclaims_total", task))
	require.Equal(t, 2.0, get("taskling_grants_total", task))
	require.Equal(t, 1.0, get("taskling_slots_in_use", task))
	require.Equal(t, 3.0, get("taskling_acquire_duration_seconds", task), "one observation per acquire")

	limit := 3
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{ConcurrencyLimit: &limit}))
	require.Equal(t, 3.0, get("taskling_slots_limit", task), "the override is the limit in force")

	disabled := false
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Enabled: &disabled}))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrTaskDisabled)
	require.Equal(t, 1.0, get("taskling_denials_total", map[string]string{"task": "app/task", "reason": "disabled"}))
}

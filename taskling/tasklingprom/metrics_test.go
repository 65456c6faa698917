package tasklingprom_test

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingprom"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// metricValue gathers m's registry and returns the value of the named metric whose labels include
// want (a counter, gauge or histogram's sample count); -1 when absent.
func metricValue(t *testing.T, m *tasklingprom.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			return value(metric)
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

func TestMetricsFollowGrantsDenialsLeaseLossesAndReclaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	// Override mode: a holder is dead 2 s after its start, and cancels itself before that (long enough
	// that a loaded machine still sees the second start denied).
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host", Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 1, DeathMode: taskling.DeathModeOverride, OverrideThreshold: 2 * time.Second}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m := tasklingprom.New(client)
	task := map[string]string{"task": "app/task"}
	get := func(name string, labels map[string]string) float64 { return metricValue(t, m, name, labels) }

	require.Equal(t, -1.0, get("taskling_grants_total", task), "nothing started yet")
	first, err := client.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	require.Equal(t, 1.0, get("taskling_grants_total", task))
	require.Equal(t, 1.0, get("taskling_slots_in_use", task))
	require.Equal(t, 1.0, get("taskling_slots_limit", task))

	_, err = client.StartExecution(ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	require.Equal(t, 1.0, get("taskling_denials_total", map[string]string{"task": "app/task", "reason": "limit"}))

	<-first.Context().Done()
	require.Equal(t, 1.0, get("taskling_lease_losses_total", task))
	require.Eventually(t, func() bool { return get("taskling_slots_in_use", task) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the holder is judged dead on the DB clock")
	second, err := client.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Complete(ctx) })
	require.Equal(t, 1.0, get("taskling_reclaims_total", task))
	require.Equal(t, 2.0, get("taskling_grants_total", task))
	require.Equal(t, 3.0, get("taskling_acquire_duration_seconds", task), "one observation per acquire")

	limit := 3
	require.NoError(t, client.UpdateTaskSettings(ctx, "app", "task", taskling.SettingsUpdate{ConcurrencyLimit: &limit}))
	require.Equal(t, 3.0, get("taskling_slots_limit", task), "the override is the limit in force")
	disabled := false
	require.NoError(t, client.UpdateTaskSettings(ctx, "app", "task", taskling.SettingsUpdate{Enabled: &disabled}))
	_, err = client.StartExecution(ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrTaskDisabled)
	require.Equal(t, 1.0, get("taskling_denials_total", map[string]string{"task": "app/task", "reason": "disabled"}))
}

func TestScrapeErrorsAreCountedWhenTheDatabaseIsAway(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host"})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m := tasklingprom.New(client)
	pool.Close()
	require.Equal(t, 1.0, metricValue(t, m, "taskling_metrics_scrape_errors_total", nil))
}

// The queue of waiters is visible: its depth and the age of its oldest waiter, fleet-wide.
func TestMetricsShowTheQueueOfWaiters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host", Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 1, KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m := tasklingprom.New(client)
	task := map[string]string{"task": "app/task"}
	get := func(name string) float64 { return metricValue(t, m, name, task) }

	holder, err := client.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	require.Equal(t, 0.0, get("taskling_waiting"))
	require.Equal(t, 0.0, get("taskling_oldest_wait_seconds"))

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := client.StartExecution(wctx, "app", "task", &taskling.StartOptions{WaitForSlot: true})
			done <- err
		}()
	}
	require.Eventually(t, func() bool { return get("taskling_waiting") == 2 }, 5*time.Second, 20*time.Millisecond)
	time.Sleep(1500 * time.Millisecond) // longer than the threshold: the waiters' heartbeats keep them queued
	require.Equal(t, 2.0, get("taskling_waiting"))
	require.Greater(t, get("taskling_oldest_wait_seconds"), 1.0)

	cancel()
	for range 2 {
		require.ErrorIs(t, <-done, context.Canceled)
	}
	require.Equal(t, 0.0, get("taskling_waiting"), "waiters that gave up left the queue")
	require.NoError(t, holder.Complete(ctx))
}

func TestBlockGaugesCountBlocksByStatusAndAtTheirRetryLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "metrics"})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m := tasklingprom.New(client)
	e, err := client.StartExecution(ctx, "app", "import", nil)
	require.NoError(t, err)
	blocks, err := e.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 40, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, blocks[0].Complete(ctx, 10))
	require.NoError(t, blocks[1].Fail(ctx, "x"))
	require.NoError(t, blocks[2].Start(ctx))
	task := map[string]string{"task": "app/import"}
	status := func(s string) map[string]string { return map[string]string{"task": "app/import", "status": s} }
	require.EqualValues(t, 1, metricValue(t, m, "taskling_blocks", status("completed")))
	require.EqualValues(t, 1, metricValue(t, m, "taskling_blocks", status("failed")))
	require.EqualValues(t, 1, metricValue(t, m, "taskling_blocks", status("started")))
	require.EqualValues(t, 1, metricValue(t, m, "taskling_blocks", status("not_started")))
	require.EqualValues(t, 1, metricValue(t, m, "taskling_blocks_at_retry_limit", task), "the failed one: taken with no retry asked")

	require.NoError(t, e.Complete(ctx)) // the unfinished ones are dead now
	require.EqualValues(t, 2, metricValue(t, m, "taskling_blocks", status("dead")))
	require.EqualValues(t, 3, metricValue(t, m, "taskling_blocks_at_retry_limit", task))
}

func TestLimitDisagreementGauge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	a, err := taskling.NewClient(pool, &taskling.Config{HostName: "a", Defaults: taskling.TaskSettings{ConcurrencyLimit: 2}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := taskling.NewClient(pool, &taskling.Config{HostName: "b", Defaults: taskling.TaskSettings{ConcurrencyLimit: 3}})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	m := tasklingprom.New(a)
	task := map[string]string{"task": "app/task"}
	e, err := a.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	require.EqualValues(t, 0, metricValue(t, m, "taskling_limit_disagreement", task))
	e, err = b.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	require.Eventually(t, func() bool { return metricValue(t, m, "taskling_limit_disagreement", task) == 1 }, 5*time.Second, 10*time.Millisecond)
}

// TestCleanupRowsAreCountedByKind: a cleanup's deleted rows show in taskling_cleanup_rows_total.
func TestCleanupRowsAreCountedByKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host", CleanupInterval: -1})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m := tasklingprom.New(client)
	for range 3 {
		e, err := client.StartExecution(ctx, "app", "task", nil)
		require.NoError(t, err)
		require.NoError(t, e.Complete(ctx))
	}
	_, err = pool.Exec(ctx, `UPDATE taskling.execution_end SET ended_at = ended_at - interval '30 days'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE taskling.task_execution SET started_at = started_at - interval '30 days'`)
	require.NoError(t, err)
	_, err = client.Cleanup(ctx, "app", "task", nil)
	require.NoError(t, err)
	require.Equal(t, 2.0, metricValue(t, m, "taskling_cleanup_rows_total", map[string]string{"task": "app/task", "kind": "completed"}),
		"the latest execution stays")
}

// A waiter with a ticket in a process whose listener is in place polls only as a fallback (README,
// How it works: direct handoff): each poll is an acquisition on the task row that releases wait
// for. Polling from 50 ms on and doubling, a 3 s wait made 6 attempts; now the first and then
// about one a second.
func TestAWaiterWithATicketPollsOnlyAsAFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	cfg := &taskling.Config{HostName: "test-host", Defaults: taskling.TaskSettings{ConcurrencyLimit: 1}}
	holderClient, err := taskling.NewClient(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(holderClient.Close)
	holder, err := holderClient.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Complete(ctx) })

	waiter, err := taskling.NewClient(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(waiter.Close)
	m := tasklingprom.New(waiter)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = waiter.StartExecution(wctx, "app", "task", &taskling.StartOptions{WaitForSlot: true})
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	attempts := metricValue(t, m, "taskling_acquire_duration_seconds", map[string]string{"task": "app/task"})
	t.Logf("%v acquisition attempts in a 3 s wait", attempts)
	require.LessOrEqual(t, attempts, 4.0)
	require.GreaterOrEqual(t, attempts, 2.0, "it still polls")
}

// TestKeyMetricsAreBoundedInCardinality: denials by the key's limit are counted under reason
// key_limit (beside limit); keys waiting is per task; a key becomes a label only when named in
// Options.Keys.
func TestKeyMetricsAreBoundedInCardinality(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "h", Defaults: taskling.TaskSettings{ConcurrencyLimit: 3, KeyLimit: 1,
		KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second}})
	require.NoError(t, err)
	defer client.Close()
	m := tasklingprom.NewWithOptions(client, tasklingprom.Options{Keys: map[string][]string{"app/task": {"acme"}}})
	for _, key := range []string{"acme", "globex"} {
		e, err := client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: key})
		require.NoError(t, err)
		defer e.Complete(ctx) //nolint:errcheck
	}
	_, err = client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: "acme"})
	require.ErrorIs(t, err, taskling.ErrKeyLimitReached)
	e, err := client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: "initech"})
	require.NoError(t, err)
	defer e.Complete(ctx) //nolint:errcheck
	_, err = client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: "other"})
	require.ErrorIs(t, err, taskling.ErrLimitReached)

	require.Equal(t, 1.0, metricValue(t, m, "taskling_denials_total", map[string]string{"task": "app/task", "reason": "key_limit"}))
	require.Equal(t, 1.0, metricValue(t, m, "taskling_denials_total", map[string]string{"task": "app/task", "reason": "limit"}))
	require.Equal(t, 3.0, metricValue(t, m, "taskling_slots_in_use", map[string]string{"task": "app/task"}))
	require.Equal(t, 0.0, metricValue(t, m, "taskling_keys_waiting", map[string]string{"task": "app/task"}))
	require.Equal(t, 1.0, metricValue(t, m, "taskling_key_cost_in_use", map[string]string{"task": "app/task", "key": "acme"}))
	require.Equal(t, -1.0, metricValue(t, m, "taskling_key_cost_in_use", map[string]string{"key": "globex"}), "a key not named is no label")
}

// TestRateMetrics: denials by a rate are counted under reasons rate and key_rate, and the gauge
// of the task's next allowed start says how long until its rate has room.
func TestRateMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "h", Defaults: taskling.TaskSettings{ConcurrencyLimit: 5,
		Rate: taskling.Rate{Count: 2, Per: time.Hour, Burst: 2}, KeyRate: taskling.Rate{Count: 1, Per: time.Hour},
		KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second}})
	require.NoError(t, err)
	defer client.Close()
	m := tasklingprom.New(client)
	e, err := client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: "acme"})
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	require.Equal(t, 0.0, metricValue(t, m, "taskling_rate_next_allowed_seconds", map[string]string{"task": "app/task"}), "one unit of 2 left")
	_, err = client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: "acme"})
	require.ErrorIs(t, err, taskling.ErrRateLimited)
	e, err = client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: "globex"})
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	_, err = client.StartExecution(ctx, "app", "task", &taskling.StartOptions{Key: "initech"})
	require.ErrorIs(t, err, taskling.ErrRateLimited)

	require.Equal(t, 1.0, metricValue(t, m, "taskling_denials_total", map[string]string{"task": "app/task", "reason": "key_rate"}))
	require.Equal(t, 1.0, metricValue(t, m, "taskling_denials_total", map[string]string{"task": "app/task", "reason": "rate"}))
	require.InDelta(t, (30 * time.Minute).Seconds(), metricValue(t, m, "taskling_rate_next_allowed_seconds", map[string]string{"task": "app/task"}), 5)
}

// TestCriticalSectionsAreMarkedInternal is issue 40 item 7: a task's critical section showed in
// the metrics as a task of the user's. Its series stay as they were (no label set changes), and
// taskling_critical_section{task,of} marks it, so that "unless on (task)
// taskling_critical_section" leaves the internal tasks out.
func TestCriticalSectionsAreMarkedInternal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "test-host"})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m := tasklingprom.New(client)
	e, err := client.StartExecution(ctx, "examples", "import", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Complete(context.Background()) })
	cs, err := e.CriticalSection(ctx, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Release(context.Background()) })

	section := map[string]string{"task": "examples/import [critical section]"}
	require.Equal(t, 1.0, metricValue(t, m, "taskling_slots_in_use", section), "its gauges stay")
	require.Equal(t, 1.0, metricValue(t, m, "taskling_critical_section",
		map[string]string{"task": "examples/import [critical section]", "of": "examples/import"}))
	require.Equal(t, -1.0, metricValue(t, m, "taskling_critical_section", map[string]string{"task": "examples/import"}),
		"the task itself is not marked")
}

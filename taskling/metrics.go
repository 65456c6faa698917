package taskling

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskling-go/taskling/execution"
)

// Metrics are a Client's Prometheus metrics. Every Client collects them (a counter update is an
// atomic add; nothing to configure); expose them by registering Client.Metrics() in your own
// registry, or serve Metrics.Registry(), a registry of their own (that is what the HTTP API's
// /metrics route does).
//
// The label "task" is "application/task". Counters and the histogram count what this process
// did. The two gauges are read from the database when scraped, so they are fleet-wide: every
// process reports the same values — aggregate them with max(), not sum().
//
//	taskling_slots_in_use{task}              slots held by live executions (gauge, from the DB)
//	taskling_slots_limit{task}               limit in force, -1 unlimited (gauge, from the DB)
//	taskling_grants_total{task}              starts granted a slot
//	taskling_denials_total{task,reason}      starts denied: reason limit, disabled or duplicate
//	                                         (a WaitForSlot start counts once, when it gives up)
//	taskling_reclaims_total{task}            slots taken from, or removed with, dead holders
//	taskling_lease_losses_total{task}        executions whose context was cancelled by ErrLeaseLost
//	taskling_heartbeat_failures_total{task}  heartbeats that failed and were retried
//	taskling_acquire_duration_seconds{task}  duration of each acquire transaction, retries included
type Metrics struct {
	store *execution.Store

	grants            *prometheus.CounterVec
	denials           *prometheus.CounterVec
	reclaims          *prometheus.CounterVec
	leaseLosses       *prometheus.CounterVec
	heartbeatFailures *prometheus.CounterVec
	acquireSeconds    *prometheus.HistogramVec
	slotsInUse        *prometheus.Desc
	slotsLimit        *prometheus.Desc
	scrapeErrors      prometheus.Counter

	registry *prometheus.Registry
}

// ScrapeTimeout bounds the database query that the slot gauges run when scraped.
const ScrapeTimeout = 5 * time.Second

func newMetrics(store *execution.Store) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "taskling", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		store:             store,
		grants:            counter("grants_total", "Starts granted a slot.", "task"),
		denials:           counter("denials_total", "Starts denied, by reason (limit, disabled, duplicate).", "task", "reason"),
		reclaims:          counter("reclaims_total", "Slots taken from, or removed with, dead holders.", "task"),
		leaseLosses:       counter("lease_losses_total", "Executions whose context was cancelled because the lease was lost.", "task"),
		heartbeatFailures: counter("heartbeat_failures_total", "Heartbeats that failed and were retried.", "task"),
		acquireSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "taskling", Name: "acquire_duration_seconds",
			Help:    "Duration of the acquire transaction, retries included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"task"}),
		slotsInUse: prometheus.NewDesc("taskling_slots_in_use", "Slots held by live executions, read from the database (fleet-wide).", []string{"task"}, nil),
		slotsLimit: prometheus.NewDesc("taskling_slots_limit", "Concurrency limit in force, read from the database (-1 unlimited).", []string{"task"}, nil),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "taskling", Name: "metrics_scrape_errors_total",
			Help: "Scrapes whose database query for the slot gauges failed."}),
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(m)
	return m
}

// Metrics returns the client's metrics collector.
func (c *Client) Metrics() *Metrics { return c.metrics }

// Registry returns a registry holding only these metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.grants.Describe(ch)
	m.denials.Describe(ch)
	m.reclaims.Describe(ch)
	m.leaseLosses.Describe(ch)
	m.heartbeatFailures.Describe(ch)
	m.acquireSeconds.Describe(ch)
	m.scrapeErrors.Describe(ch)
	ch <- m.slotsInUse
	ch <- m.slotsLimit
}

// Collect implements prometheus.Collector. It reads the slot gauges from the database (bounded by
// ScrapeTimeout); when that fails they are left out and taskling_metrics_scrape_errors_total grows.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	if tasks, err := m.store.ListTasks(ctx); err != nil {
		m.scrapeErrors.Inc()
	} else {
		for _, t := range tasks {
			name := t.Application + "/" + t.Task
			ch <- prometheus.MustNewConstMetric(m.slotsInUse, prometheus.GaugeValue, float64(t.SlotsUsed), name)
			ch <- prometheus.MustNewConstMetric(m.slotsLimit, prometheus.GaugeValue, float64(t.Limit), name)
		}
	}
	m.grants.Collect(ch)
	m.denials.Collect(ch)
	m.reclaims.Collect(ch)
	m.leaseLosses.Collect(ch)
	m.heartbeatFailures.Collect(ch)
	m.acquireSeconds.Collect(ch)
	m.scrapeErrors.Collect(ch)
}

// The hooks below are called from the start and execution paths; they are safe on a nil
// *Metrics (a Client built without NewClient records nothing).

// acquired records one acquire transaction.
func (m *Metrics) acquired(req execution.AcquireRequest, res execution.AcquireResult, err error, took time.Duration) {
	if m == nil {
		return
	}
	m.acquireSeconds.WithLabelValues(req.TaskName).Observe(took.Seconds())
	if err != nil {
		return
	}
	if len(res.Reclaimed) > 0 { // set only when the reclaims were committed
		m.reclaims.WithLabelValues(req.TaskName).Add(float64(len(res.Reclaimed)))
	}
	switch {
	case res.Denied == execution.NotDenied:
		m.grants.WithLabelValues(req.TaskName).Inc()
	case req.RecordDenial || res.Denied != execution.DeniedLimit: // a waiter's limit denials are counted when it gives up
		m.denied(req.TaskName, res.Denied)
	}
}

func (m *Metrics) denied(task string, reason execution.DenyReason) {
	if m == nil {
		return
	}
	r := "limit"
	switch reason {
	case execution.DeniedDisabled:
		r = "disabled"
	case execution.DeniedDuplicate:
		r = "duplicate"
	}
	m.denials.WithLabelValues(task, r).Inc()
}

func (m *Metrics) leaseLost(task string) {
	if m != nil {
		m.leaseLosses.WithLabelValues(task).Inc()
	}
}

func (m *Metrics) heartbeatFailed(task string) {
	if m != nil {
		m.heartbeatFailures.WithLabelValues(task).Inc()
	}
}

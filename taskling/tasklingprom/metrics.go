// Package tasklingprom exposes a taskling Client's work as Prometheus metrics. It lives apart
// from package taskling so that programs that never scrape metrics do not link Prometheus.
//
//	client, err := taskling.NewClient(pool, nil)
//	…
//	prometheus.MustRegister(tasklingprom.New(client))
//
// The label "task" is "application/task". Counters and the histogram count what this process
// did, from the moment New is called. The two slot gauges are read from the database when
// scraped, so they are fleet-wide: every process reports the same values — aggregate them with
// max(), not sum().
//
//	taskling_slots_in_use{task}              slots held by live executions, each its cost (gauge,
//	                                         from the DB)
//	taskling_slots_limit{task}               limit in force, -1 unlimited (gauge, from the DB)
//	taskling_waiting{task}                   live waiters queued for a slot (gauge, from the DB)
//	taskling_oldest_wait_seconds{task}       how long the oldest of them has waited (gauge)
//	taskling_keys_waiting{task}              keys with live waiters (gauge, from the DB)
//	taskling_rate_next_allowed_seconds{task} until a start of cost 1 fits the task's rate, on the
//	                                         database clock; only tasks under a rate (gauge, from the DB)
//	taskling_key_cost_in_use{task,key}       cost held by a key's live holders, for the keys
//	                                         named in Options.Keys only (gauge, from the DB)
//	taskling_key_waiting{task,key}           live waiters of those keys (gauge, from the DB)
//	taskling_limit_disagreement{task}        1 when hosts declared different limits in the
//	                                         last 10 minutes (gauge, from the DB)
//	taskling_blocks{task,status}             blocks by status of their latest attempt:
//	                                         not_started, started, completed, failed, dead (gauge)
//	taskling_blocks_at_retry_limit{task}     blocks no execution with the same options takes
//	                                         again (BlockInfo.AtRetryLimit; gauge)
//	taskling_grants_total{task}              starts granted a slot
//	taskling_denials_total{task,reason}      starts refused: reason limit (the task's), key_limit (its
//	                                         key's), rate (the task's), key_rate (its key's), duplicate
//	                                         (each recorded as a blocked execution), disabled or retired
//	                                         (Work counts a deferral as a rate denial; a WaitForSlot
//	                                         start counts once, when it gives up)
//	taskling_reclaims_total{task}            slots taken from, or removed with, dead holders
//	taskling_lease_losses_total{task}        executions whose context was cancelled by ErrLeaseLost
//	taskling_heartbeat_failures_total{task}  heartbeats that failed and were retried
//	taskling_cleanup_rows_total{task,kind}   rows this process's cleanups deleted: kind completed,
//	                                         failed, blocked (executions), blocks, submissions
//	taskling_acquire_duration_seconds{task}  duration of each acquire transaction, retries included
//	taskling_wait_duration_seconds{task}     a WaitForSlot start's wait: ticket queued → grant, on the
//	                                         database clock (0 when granted at once)
//	taskling_submission_wait_duration_seconds{task}
//	                                         submission created → attempt start, on the database clock
//	taskling_run_duration_seconds{task,outcome}
//	                                         grant → end of an execution: outcome completed, failed,
//	                                         panicked or lease_lost
//	taskling_submissions{task,status}        submissions by status: waiting, in_progress, completed,
//	                                         dead, cancelled (gauge, from the DB)
//	taskling_critical_section{task,of}       1 for each task that is a task's critical section (an
//	                                         internal task, "<task> [critical section]"), of that task:
//	                                         "unless on (task) taskling_critical_section" leaves them out
//	taskling_metrics_scrape_errors_total     scrapes whose database query for the gauges failed
package tasklingprom

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskling-go/taskling/taskling"
)

// ScrapeTimeout bounds the database query that the slot gauges run when scraped.
const ScrapeTimeout = 5 * time.Second

// Metrics is a prometheus.Collector of one Client's metrics.
type Metrics struct {
	client *taskling.Client

	grants            *prometheus.CounterVec
	denials           *prometheus.CounterVec
	reclaims          *prometheus.CounterVec
	leaseLosses       *prometheus.CounterVec
	heartbeatFailures *prometheus.CounterVec
	cleanupRows       *prometheus.CounterVec
	acquireSeconds    *prometheus.HistogramVec
	waitSeconds       *prometheus.HistogramVec
	subWaitSeconds    *prometheus.HistogramVec
	runSeconds        *prometheus.HistogramVec
	submissions       *prometheus.Desc
	slotsInUse        *prometheus.Desc
	slotsLimit        *prometheus.Desc
	waiting           *prometheus.Desc
	oldestWait        *prometheus.Desc
	disagreement      *prometheus.Desc
	blocks            *prometheus.Desc
	blocksAtLimit     *prometheus.Desc
	keysWaiting       *prometheus.Desc
	nextAllowed       *prometheus.Desc
	keyCost           *prometheus.Desc
	keyWaiting        *prometheus.Desc
	criticalSection   *prometheus.Desc
	scrapeErrors      prometheus.Counter
	opts              Options

	registry *prometheus.Registry
	hooks    taskling.Hooks // what New added to the client
}

// DurationBuckets are the buckets of the wait and run histograms, in seconds.
var DurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Options configure the metrics; the zero value is the default.
type Options struct {
	// Keys names, by task ("application/task"), the keys that get gauges of their own
	// (taskling_key_cost_in_use, taskling_key_waiting): no other key becomes a label, so the
	// metrics' cardinality stays what the operator chose. They are read from the task's view
	// (Client.Task), which shows at most taskling.MaxKeysShown keys, the busiest first: a named key
	// outside those reads 0.
	Keys map[string][]string
}

// denialsHelp says which denials are the executions the dashboard and the CLI show as blocked.
const denialsHelp = "Starts refused, by reason: limit, key_limit, rate, key_rate, duplicate (each recorded as a blocked execution), " +
	"disabled, retired (recorded nowhere)."

// New returns the metrics of client, which it starts counting through client.AddHooks.
func New(client *taskling.Client) *Metrics { return NewWithOptions(client, Options{}) }

// NewWithOptions is New with options.
func NewWithOptions(client *taskling.Client, opts Options) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "taskling", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		client:            client,
		opts:              opts,
		grants:            counter("grants_total", "Starts granted a slot.", "task"),
		denials:           counter("denials_total", denialsHelp, "task", "reason"),
		reclaims:          counter("reclaims_total", "Slots taken from, or removed with, dead holders.", "task"),
		leaseLosses:       counter("lease_losses_total", "Executions whose context was cancelled because the lease was lost.", "task"),
		heartbeatFailures: counter("heartbeat_failures_total", "Heartbeats that failed and were retried.", "task"),
		cleanupRows:       counter("cleanup_rows_total", "Rows deleted by this process's cleanups, by kind (completed, failed, blocked, blocks, submissions).", "task", "kind"),
		acquireSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "taskling", Name: "acquire_duration_seconds",
			Help:    "Duration of the acquire transaction, retries included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"task"}),
		waitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "taskling", Name: "wait_duration_seconds",
			Help:    "Wait of a WaitForSlot start from its ticket's queueing to its grant, on the database clock (0 when granted at once).",
			Buckets: DurationBuckets}, []string{"task"}),
		subWaitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "taskling", Name: "submission_wait_duration_seconds",
			Help: "Time from a submission's creation to the start of an attempt, on the database clock.", Buckets: DurationBuckets}, []string{"task"}),
		runSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "taskling", Name: "run_duration_seconds",
			Help: "Time from an execution's grant to its end, by outcome (completed, failed, panicked, lease_lost).", Buckets: DurationBuckets},
			[]string{"task", "outcome"}),
		submissions: prometheus.NewDesc("taskling_submissions", "Submissions by status, read from the database (fleet-wide).",
			[]string{"task", "status"}, nil),
		slotsInUse: prometheus.NewDesc("taskling_slots_in_use", "Slots held by live executions, read from the database (fleet-wide).", []string{"task"}, nil),
		slotsLimit: prometheus.NewDesc("taskling_slots_limit", "Concurrency limit in force, read from the database (-1 unlimited).", []string{"task"}, nil),
		waiting:    prometheus.NewDesc("taskling_waiting", "Live WaitForSlot starts queued for a slot, read from the database (fleet-wide).", []string{"task"}, nil),
		oldestWait: prometheus.NewDesc("taskling_oldest_wait_seconds", "How long the oldest queued waiter has waited (0 when none).", []string{"task"}, nil),
		disagreement: prometheus.NewDesc("taskling_limit_disagreement", "1 when hosts declared different limits for the task in the last 10 minutes.",
			[]string{"task"}, nil),
		blocks: prometheus.NewDesc("taskling_blocks", "Blocks by the status of their latest attempt, read from the database (fleet-wide).",
			[]string{"task", "status"}, nil),
		blocksAtLimit: prometheus.NewDesc("taskling_blocks_at_retry_limit", "Blocks not completed, not running, past their retry limit.",
			[]string{"task"}, nil),
		keysWaiting: prometheus.NewDesc("taskling_keys_waiting", "Keys with live waiters, read from the database (fleet-wide).", []string{"task"}, nil),
		nextAllowed: prometheus.NewDesc("taskling_rate_next_allowed_seconds",
			"Seconds until a start of cost 1 fits the task's rate, on the database clock (0: now); tasks under a rate only.", []string{"task"}, nil),
		keyCost: prometheus.NewDesc("taskling_key_cost_in_use", "Cost held by a named key's live holders (Options.Keys), read from the database.",
			[]string{"task", "key"}, nil),
		keyWaiting: prometheus.NewDesc("taskling_key_waiting", "Live waiters of a named key (Options.Keys), read from the database.",
			[]string{"task", "key"}, nil),
		criticalSection: prometheus.NewDesc("taskling_critical_section",
			"1 for each task that is another's critical section (internal, named \"<task> [critical section]\"); of: that other task.",
			[]string{"task", "of"}, nil),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "taskling", Name: "metrics_scrape_errors_total",
			Help: "Scrapes whose database query for the slot gauges failed."}),
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(m)
	name := func(app, task string) string { return app + "/" + task }
	m.hooks = taskling.Hooks{
		AcquireDone: func(app, task string, took time.Duration) {
			m.acquireSeconds.WithLabelValues(name(app, task)).Observe(took.Seconds())
		},
		Granted: func(app, task string) { m.grants.WithLabelValues(name(app, task)).Inc() },
		Denied: func(app, task string, reason taskling.DenyReason) {
			m.denials.WithLabelValues(name(app, task), string(reason)).Inc()
		},
		Reclaimed:       func(app, task string, n int) { m.reclaims.WithLabelValues(name(app, task)).Add(float64(n)) },
		LeaseLost:       func(app, task string) { m.leaseLosses.WithLabelValues(name(app, task)).Inc() },
		HeartbeatFailed: func(app, task string) { m.heartbeatFailures.WithLabelValues(name(app, task)).Inc() },
		Cleaned: func(app, task string, c taskling.CleanupCounts) {
			for kind, n := range map[string]int64{"completed": c.Completed, "failed": c.Failed, "blocked": c.Blocked,
				"blocks": c.Blocks, "submissions": c.Submissions} {
				if n > 0 {
					m.cleanupRows.WithLabelValues(name(app, task), kind).Add(float64(n))
				}
			}
		},
		Waited: func(app, task string, took time.Duration) {
			m.waitSeconds.WithLabelValues(name(app, task)).Observe(took.Seconds())
		},
		SubmissionWaited: func(app, task string, took time.Duration) {
			m.subWaitSeconds.WithLabelValues(name(app, task)).Observe(took.Seconds())
		},
		Ended: func(app, task string, outcome taskling.Outcome, took time.Duration) {
			m.runSeconds.WithLabelValues(name(app, task), string(outcome)).Observe(took.Seconds())
		},
	}
	client.AddHooks(m.hooks)
	return m
}

// Registry returns a registry holding only these metrics (what `taskling serve` serves).
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// counted are the metrics that count what this process did.
func (m *Metrics) counted() []prometheus.Collector {
	return []prometheus.Collector{m.grants, m.denials, m.reclaims, m.leaseLosses, m.heartbeatFailures, m.cleanupRows, m.acquireSeconds,
		m.waitSeconds, m.subWaitSeconds, m.runSeconds, m.scrapeErrors}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.counted() {
		c.Describe(ch)
	}
	ch <- m.slotsInUse
	ch <- m.slotsLimit
	ch <- m.waiting
	ch <- m.oldestWait
	ch <- m.disagreement
	ch <- m.blocks
	ch <- m.blocksAtLimit
	ch <- m.submissions
	ch <- m.keysWaiting
	ch <- m.nextAllowed
	ch <- m.keyCost
	ch <- m.keyWaiting
	ch <- m.criticalSection
}

// Collect implements prometheus.Collector. It reads the slot and block gauges from the database
// (bounded by ScrapeTimeout); when that fails they are left out and
// taskling_metrics_scrape_errors_total grows by one.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	failed := false
	if page, err := m.client.Tasks(ctx, nil); err != nil {
		failed = true
	} else {
		for _, t := range page.Tasks {
			name := t.Application + "/" + t.Task
			ch <- prometheus.MustNewConstMetric(m.slotsInUse, prometheus.GaugeValue, float64(t.SlotsUsed), name)
			ch <- prometheus.MustNewConstMetric(m.slotsLimit, prometheus.GaugeValue, float64(t.Limit), name)
			ch <- prometheus.MustNewConstMetric(m.waiting, prometheus.GaugeValue, float64(t.Waiting), name)
			age := 0.0
			if !t.OldestWaitSince.IsZero() {
				age = max(0, time.Since(t.OldestWaitSince).Seconds())
			}
			ch <- prometheus.MustNewConstMetric(m.oldestWait, prometheus.GaugeValue, age, name)
			disagree := 0.0
			if t.Disagreement != nil {
				disagree = 1
			}
			ch <- prometheus.MustNewConstMetric(m.disagreement, prometheus.GaugeValue, disagree, name)
			ch <- prometheus.MustNewConstMetric(m.keysWaiting, prometheus.GaugeValue, float64(t.KeysWaiting), name)
			if !t.Rate.IsZero() {
				ch <- prometheus.MustNewConstMetric(m.nextAllowed, prometheus.GaugeValue, t.NextAllowed.Seconds(), name)
			}
			if of, ok := strings.CutSuffix(t.Task, taskling.SectionSuffix); ok {
				ch <- prometheus.MustNewConstMetric(m.criticalSection, prometheus.GaugeValue, 1, name, t.Application+"/"+of)
			}
		}
	}
	failed = !m.collectKeys(ctx, ch) || failed
	if counts, err := m.client.BlockCounts(ctx); err != nil {
		failed = true
	} else {
		atLimit := map[string]int64{}
		for _, c := range counts {
			name := c.Application + "/" + c.Task
			ch <- prometheus.MustNewConstMetric(m.blocks, prometheus.GaugeValue, float64(c.Blocks), name, string(c.Status))
			atLimit[name] += c.AtRetryLimit
		}
		for name, n := range atLimit {
			ch <- prometheus.MustNewConstMetric(m.blocksAtLimit, prometheus.GaugeValue, float64(n), name)
		}
	}
	if counts, err := m.client.SubmissionCounts(ctx); err != nil {
		failed = true
	} else {
		for _, c := range counts {
			ch <- prometheus.MustNewConstMetric(m.submissions, prometheus.GaugeValue, float64(c.Submissions), c.Application+"/"+c.Task, string(c.Status))
		}
	}
	if failed {
		m.scrapeErrors.Inc() // once per scrape
	}
	for _, c := range m.counted() {
		c.Collect(ch)
	}
}

// collectKeys reads the gauges of the keys named in Options.Keys; false when a read failed.
func (m *Metrics) collectKeys(ctx context.Context, ch chan<- prometheus.Metric) bool {
	ok := true
	for name, keys := range m.opts.Keys {
		app, task, found := strings.Cut(name, "/")
		if !found || len(keys) == 0 {
			continue
		}
		d, err := m.client.Task(ctx, app, task)
		if errors.Is(err, taskling.ErrNotFound) {
			continue
		}
		if err != nil {
			ok = false
			continue
		}
		by := map[string]taskling.KeyInfo{}
		for _, k := range d.Keys {
			by[k.Key] = k
		}
		for _, key := range keys {
			k := by[key] // a key not shown holds nothing
			ch <- prometheus.MustNewConstMetric(m.keyCost, prometheus.GaugeValue, float64(k.CostInUse), name, key)
			ch <- prometheus.MustNewConstMetric(m.keyWaiting, prometheus.GaugeValue, float64(k.Waiting), name, key)
		}
	}
	return ok
}

package tasklingotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/taskling-go/taskling/taskling"
)

// Attribute keys the instruments use besides AttrTask, AttrOutcome and AttrDenyReason.
const (
	AttrCleanupKind      = attribute.Key("taskling.cleanup.kind")
	AttrSubmissionStatus = attribute.Key("taskling.submission.status")
)

// CollectTimeout bounds the database reads of the gauges at each collection.
const CollectTimeout = 5 * time.Second

// DurationBuckets are the histograms' bucket boundaries, in seconds (the same as tasklingprom's
// wait and run histograms).
var DurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// acquireBuckets are those of taskling.acquire.duration.
var acquireBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// instruments are the metrics of one client.
type instruments struct {
	client *taskling.Client

	grants, denials, reclaims, leaseLosses, heartbeatFailures, cleanupRows metric.Int64Counter
	acquire, wait, submissionWait, run                                     metric.Float64Histogram
	slotsInUse, slotsLimit, waiting, submissions                           metric.Int64ObservableGauge
	oldestWait                                                             metric.Float64ObservableGauge
	// With Options.MessagingConventions.
	processDuration  metric.Float64Histogram
	consumedMessages metric.Int64Counter

	registration metric.Registration
}

// instrumentMaker makes instruments, keeping the first error.
type instrumentMaker struct {
	m   metric.Meter
	err error
}

func (mk *instrumentMaker) counter(name, unit, desc string) metric.Int64Counter {
	c, err := mk.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	mk.keep(err)
	return c
}

func (mk *instrumentMaker) histogram(name, desc string, buckets []float64) metric.Float64Histogram {
	h, err := mk.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
	mk.keep(err)
	return h
}

func (mk *instrumentMaker) gauge(name, unit, desc string) metric.Int64ObservableGauge {
	g, err := mk.m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	mk.keep(err)
	return g
}

func (mk *instrumentMaker) keep(err error) {
	if mk.err == nil {
		mk.err = err
	}
}

func newInstruments(client *taskling.Client, o Options) (*instruments, error) {
	mk := &instrumentMaker{m: o.MeterProvider.Meter(ScopeName)}
	in := &instruments{
		client:            client,
		grants:            mk.counter("taskling.grants", "{start}", "Starts granted a slot."),
		denials:           mk.counter("taskling.denials", "{start}", "Starts denied, by reason (limit, key_limit, rate, key_rate, disabled, duplicate, retired)."),
		reclaims:          mk.counter("taskling.reclaims", "{slot}", "Slots taken from, or removed with, dead holders."),
		leaseLosses:       mk.counter("taskling.lease_losses", "{execution}", "Executions whose context was cancelled because the lease was lost."),
		heartbeatFailures: mk.counter("taskling.heartbeat_failures", "{heartbeat}", "Heartbeats that failed and were retried."),
		cleanupRows:       mk.counter("taskling.cleanup.rows", "{row}", "Rows deleted by this process's cleanups, by kind."),
		acquire:           mk.histogram("taskling.acquire.duration", "Duration of the acquire transaction, retries included.", acquireBuckets),
		wait: mk.histogram("taskling.wait.duration",
			"Wait of a WaitForSlot start from its ticket's queueing to its grant, on the database clock (0 when granted at once).", DurationBuckets),
		submissionWait: mk.histogram("taskling.submission.wait.duration",
			"Time from a submission's creation to the start of an attempt, on the database clock.", DurationBuckets),
		run:         mk.histogram("taskling.run.duration", "Time from an execution's grant to its end, by outcome.", DurationBuckets),
		slotsInUse:  mk.gauge("taskling.slots.in_use", "{slot}", "Slots held by live executions, read from the database (fleet-wide)."),
		slotsLimit:  mk.gauge("taskling.slots.limit", "{slot}", "Concurrency limit in force, read from the database (-1 unlimited)."),
		waiting:     mk.gauge("taskling.waiting", "{start}", "Live WaitForSlot starts queued for a slot, read from the database (fleet-wide)."),
		submissions: mk.gauge("taskling.submissions", "{submission}", "Submissions by status, read from the database (fleet-wide)."),
	}
	var err error
	in.oldestWait, err = mk.m.Float64ObservableGauge("taskling.oldest_wait", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest queued waiter has waited (0 when none)."))
	mk.keep(err)
	if o.MessagingConventions {
		in.processDuration = mk.histogram("messaging.process.duration", "Duration of processing a submission: an attempt's run.", DurationBuckets)
		in.consumedMessages = mk.counter("messaging.client.consumed.messages", "{message}", "Submissions whose attempt started.")
	}
	if mk.err != nil {
		return nil, mk.err
	}
	in.registration, err = mk.m.RegisterCallback(in.observe, in.slotsInUse, in.slotsLimit, in.waiting, in.oldestWait, in.submissions)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// taskAttr is the task attribute of app/task.
func taskAttr(app, task string) attribute.KeyValue { return AttrTask.String(app + "/" + task) }

// hooks are the client hooks that feed the counters and histograms.
func (in *instruments) hooks() taskling.Hooks {
	ctx := context.Background()
	one := func(c metric.Int64Counter, app, task string, more ...attribute.KeyValue) {
		c.Add(ctx, 1, metric.WithAttributes(append(more, taskAttr(app, task))...))
	}
	seconds := func(h metric.Float64Histogram, app, task string, d time.Duration, more ...attribute.KeyValue) {
		h.Record(ctx, d.Seconds(), metric.WithAttributes(append(more, taskAttr(app, task))...))
	}
	return taskling.Hooks{
		AcquireDone: func(app, task string, took time.Duration) { seconds(in.acquire, app, task, took) },
		Granted:     func(app, task string) { one(in.grants, app, task) },
		Denied: func(app, task string, reason taskling.DenyReason) {
			one(in.denials, app, task, AttrDenyReason.String(string(reason)))
		},
		Reclaimed: func(app, task string, n int) {
			in.reclaims.Add(ctx, int64(n), metric.WithAttributes(taskAttr(app, task)))
		},
		LeaseLost:       func(app, task string) { one(in.leaseLosses, app, task) },
		HeartbeatFailed: func(app, task string) { one(in.heartbeatFailures, app, task) },
		Cleaned: func(app, task string, c taskling.CleanupCounts) {
			for kind, n := range map[string]int64{"completed": c.Completed, "failed": c.Failed, "blocked": c.Blocked,
				"blocks": c.Blocks, "submissions": c.Submissions} {
				if n > 0 {
					in.cleanupRows.Add(ctx, n, metric.WithAttributes(taskAttr(app, task), AttrCleanupKind.String(kind)))
				}
			}
		},
		Waited:           func(app, task string, took time.Duration) { seconds(in.wait, app, task, took) },
		SubmissionWaited: func(app, task string, took time.Duration) { seconds(in.submissionWait, app, task, took) },
		Ended: func(app, task string, outcome taskling.Outcome, took time.Duration) {
			seconds(in.run, app, task, took, AttrOutcome.String(string(outcome)))
		},
	}
}

// observe reads the gauges from the database.
func (in *instruments) observe(ctx context.Context, o metric.Observer) error {
	ctx, cancel := context.WithTimeout(ctx, CollectTimeout)
	defer cancel()
	page, err := in.client.Tasks(ctx, nil)
	if err != nil {
		return err
	}
	for _, t := range page.Tasks {
		attrs := metric.WithAttributes(taskAttr(t.Application, t.Task))
		o.ObserveInt64(in.slotsInUse, int64(t.SlotsUsed), attrs)
		o.ObserveInt64(in.slotsLimit, int64(t.Limit), attrs)
		o.ObserveInt64(in.waiting, int64(t.Waiting), attrs)
		age := 0.0
		if !t.OldestWaitSince.IsZero() {
			age = max(0, time.Since(t.OldestWaitSince).Seconds())
		}
		o.ObserveFloat64(in.oldestWait, age, attrs)
	}
	counts, err := in.client.SubmissionCounts(ctx)
	if err != nil {
		return err
	}
	for _, c := range counts {
		o.ObserveInt64(in.submissions, c.Submissions, metric.WithAttributes(taskAttr(c.Application, c.Task),
			AttrSubmissionStatus.String(string(c.Status))))
	}
	return nil
}

// processed records an attempt's run for the messaging conventions.
func (in *instruments) processed(info taskling.StartInfo, e taskling.End, took time.Duration) {
	if in.processDuration == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("messaging.system", "taskling"),
		attribute.String("messaging.destination.name", info.Application+"/"+info.Task),
		attribute.String("messaging.operation.name", "work"), attribute.String("messaging.operation.type", "process")}
	if e.Outcome != taskling.OutcomeCompleted {
		attrs = append(attrs, attribute.String("error.type", string(e.Outcome)))
	}
	in.processDuration.Record(context.Background(), took.Seconds(), metric.WithAttributes(attrs...))
}

// consumed counts an attempt's start for the messaging conventions.
func (in *instruments) consumed(info taskling.StartInfo) {
	if in.consumedMessages == nil {
		return
	}
	in.consumedMessages.Add(context.Background(), 1, metric.WithAttributes(attribute.String("messaging.system", "taskling"),
		attribute.String("messaging.destination.name", info.Application+"/"+info.Task),
		attribute.String("messaging.operation.name", "work"), attribute.String("messaging.operation.type", "process")))
}

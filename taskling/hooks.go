package taskling

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Hooks are callbacks a Client calls as it works, for metrics and tracing; package
// taskling/tasklingprom turns them into Prometheus metrics, and taskling/tasklingotel into
// OpenTelemetry spans and instruments. A nil func is not called. Hooks run synchronously on the
// goroutine doing the work: keep them fast and never block in them.
type Hooks struct {
	// AcquireDone: an acquire transaction ended (granted, denied or failed) after took, retries
	// included.
	AcquireDone func(app, task string, took time.Duration)
	// Granted: a start was granted a slot.
	Granted func(app, task string)
	// Denied: a start was denied. A WaitForSlot start counts once, when it gives up.
	Denied func(app, task string, reason DenyReason)
	// Reclaimed: an acquisition took slots from (or removed the slots of) n dead holders.
	Reclaimed func(app, task string, n int)
	// LeaseLost: an execution's context was cancelled with ErrLeaseLost.
	LeaseLost func(app, task string)
	// HeartbeatFailed: a heartbeat failed; it is retried.
	HeartbeatFailed func(app, task string)
	// Cleaned: one cleanup transaction of the task (automatic or Cleanup) deleted these rows.
	Cleaned func(app, task string, deleted CleanupCounts)

	// Waited: a WaitForSlot start (an attempt of Work among them) was granted a slot, took after
	// its ticket was queued, on the database clock; 0 when it was granted without queueing.
	Waited func(app, task string, took time.Duration)
	// SubmissionWaited: an attempt of a submission was granted its slot, took after the
	// submission was created (Submit), on the database clock.
	SubmissionWaited func(app, task string, took time.Duration)
	// Ended: an execution ended (Complete, or the end of the function of Run, Work or a
	// scheduled run), took after its grant on this process's clock, with outcome
	// OutcomeCompleted, OutcomeFailed, OutcomePanicked or OutcomeLeaseLost.
	Ended func(app, task string, outcome Outcome, took time.Duration)

	// TraceContext returns the W3C trace context of ctx, which Submit and SubmitTx store with a
	// submission whose SubmitOptions.TraceContext is empty. The first hook that returns a
	// non-zero one wins. Package tasklingotel sets it.
	TraceContext func(ctx context.Context) TraceContext
	// StartBegan: a start began (StartInfo.Kind says which call). It returns the context the
	// start goes on with (nil: ctx) and the callbacks that follow it (nil: none); the context's
	// values reach the execution's Context through StartTrace.Granted. A critical section's wait
	// is reported to its execution's StartTrace, not here.
	StartBegan func(ctx context.Context, s StartInfo) (context.Context, *StartTrace)
}

// DenyReason says why a start was denied.
type DenyReason string

const (
	DenyLimit     DenyReason = "limit"     // every slot is held (ErrLimitReached)
	DenyKeyLimit  DenyReason = "key_limit" // the start's key is at its limit (ErrKeyLimitReached)
	DenyRate      DenyReason = "rate"      // the task's rate has no room (ErrRateLimited)
	DenyKeyRate   DenyReason = "key_rate"  // the start's key's rate has no room (ErrRateLimited)
	DenyDisabled  DenyReason = "disabled"  // the task is disabled (ErrTaskDisabled)
	DenyDuplicate DenyReason = "duplicate" // an idempotent reference already ran (ErrDuplicateReference)
	DenyRetired   DenyReason = "retired"   // the task is retired (ErrTaskRetired)
)

// AddHooks adds h to the hooks the client calls from now on.
func (c *Client) AddHooks(h Hooks) { c.hooks.add(h) }

// hookList is the hooks a Client calls; reading it on the hot path is one atomic load.
type hookList struct {
	mu   sync.Mutex // serializes add
	list atomic.Pointer[[]Hooks]
}

func (l *hookList) add(h Hooks) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var next []Hooks
	if cur := l.list.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, h)
	l.list.Store(&next)
}

func (l *hookList) each(fn func(Hooks)) {
	if cur := l.list.Load(); cur != nil {
		for _, h := range *cur {
			fn(h)
		}
	}
}

func (l *hookList) acquireDone(app, task string, took time.Duration) {
	l.each(func(h Hooks) {
		if h.AcquireDone != nil {
			h.AcquireDone(app, task, took)
		}
	})
}

func (l *hookList) granted(app, task string) {
	l.each(func(h Hooks) {
		if h.Granted != nil {
			h.Granted(app, task)
		}
	})
}

func (l *hookList) denied(app, task string, reason DenyReason) {
	l.each(func(h Hooks) {
		if h.Denied != nil {
			h.Denied(app, task, reason)
		}
	})
}

func (l *hookList) reclaimed(app, task string, n int) {
	l.each(func(h Hooks) {
		if h.Reclaimed != nil {
			h.Reclaimed(app, task, n)
		}
	})
}

func (l *hookList) leaseLost(app, task string) {
	l.each(func(h Hooks) {
		if h.LeaseLost != nil {
			h.LeaseLost(app, task)
		}
	})
}

func (l *hookList) cleaned(app, task string, deleted CleanupCounts) {
	l.each(func(h Hooks) {
		if h.Cleaned != nil {
			h.Cleaned(app, task, deleted)
		}
	})
}

func (l *hookList) waited(app, task string, took time.Duration) {
	l.each(func(h Hooks) {
		if h.Waited != nil {
			h.Waited(app, task, took)
		}
	})
}

func (l *hookList) submissionWaited(app, task string, took time.Duration) {
	l.each(func(h Hooks) {
		if h.SubmissionWaited != nil {
			h.SubmissionWaited(app, task, took)
		}
	})
}

func (l *hookList) ended(app, task string, outcome Outcome, took time.Duration) {
	l.each(func(h Hooks) {
		if h.Ended != nil {
			h.Ended(app, task, outcome, took)
		}
	})
}

// traceContext is the first non-zero trace context a hook reads from ctx.
func (l *hookList) traceContext(ctx context.Context) TraceContext {
	var tc TraceContext
	l.each(func(h Hooks) {
		if tc.IsZero() && h.TraceContext != nil {
			tc = h.TraceContext(ctx)
		}
	})
	return tc
}

func (l *hookList) heartbeatFailed(app, task string) {
	l.each(func(h Hooks) {
		if h.HeartbeatFailed != nil {
			h.HeartbeatFailed(app, task)
		}
	})
}

// Stats are a client's counters since it was created.
type Stats struct {
	// Transactions is the number of token transactions that ended without error (committed, or
	// rolled back with nothing to write).
	Transactions int64
	// Operations is the number of acquisitions and releases they served: more than Transactions
	// when one process's concurrent requests on a task were served together.
	Operations int64
	// Retries is the number of token transactions retried after a serialization failure, a
	// deadlock, or a holder that renewed its lease while being reclaimed.
	Retries int64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := c.store.Stats()
	return Stats{Transactions: s.Transactions, Operations: s.Operations, Retries: s.SerializationRetries}
}

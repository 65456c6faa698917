package taskling

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// What a start looks like to the hooks that trace it and time it (Hooks.StartBegan, Waited,
// SubmissionWaited, Ended). Package taskling/tasklingotel turns them into OpenTelemetry spans and
// instruments; the core links nothing of OpenTelemetry.

// StartKind says which call a start comes from.
type StartKind string

const (
	StartDirect    StartKind = "start"     // StartExecution or Run
	StartAttempt   StartKind = "attempt"   // an attempt of a submission, run by Work
	StartScheduled StartKind = "scheduled" // a scheduler's run of a cron instant it claimed
	StartBackfill  StartKind = "backfill"  // a Backfill run of a cron instant
)

// StartInfo describes a start to Hooks.StartBegan.
type StartInfo struct {
	Application, Task string
	Kind              StartKind
	// At is when the request began, on this process's clock. A scheduled or backfill run is
	// reported once its instant is claimed, At being when its claim began.
	At          time.Time
	WaitForSlot bool
	Priority    int
	// Key and Cost are the start's StartOptions.Key ("": none) and the slots it asks for (1
	// unless StartOptions.Cost says more).
	Key  string
	Cost int
	// SubmissionID is the submission an attempt runs (0: none); SubmissionTrace the trace context
	// stored with it (zero: none), and SubmittedAt when it was created (database clock).
	SubmissionID    int64
	SubmissionTrace TraceContext
	SubmittedAt     time.Time
	// ScheduledFor is the cron instant of a scheduled or backfill run.
	ScheduledFor time.Time
}

// Outcome is how a start ended.
type Outcome string

const (
	OutcomeCompleted Outcome = "completed"  // its execution completed
	OutcomeFailed    Outcome = "failed"     // fn returned an error, or the execution was marked failed
	OutcomePanicked  Outcome = "panicked"   // fn panicked (Run, Work, a scheduled run)
	OutcomeLeaseLost Outcome = "lease_lost" // its lease was lost (ErrLeaseLost) before it ended
	OutcomeDenied    Outcome = "denied"     // refused a slot: End.DenyReason says why
	OutcomeError     Outcome = "error"      // the start failed (a database error, a bad argument, …)
)

// Grant is what a granted start learns, passed to StartTrace.Granted.
type Grant struct {
	ExecutionID, FencingToken int64
	// Attempt is which attempt of its submission the execution is (0: none).
	Attempt int
	// StartedAt is the grant's time on the database clock.
	StartedAt time.Time
	// Queued reports whether the start waited in its task's queue; Waited is then from its
	// ticket's queueing to the grant, on the database clock.
	Queued bool
	Waited time.Duration
}

// BlockStart describes a block attempt an execution started (Block.Start, ListBlock.Start).
type BlockStart struct {
	ID      int64
	Kind    BlockKind
	Attempt int
	Forced  bool
}

// End is how a start ended, passed to StartTrace.Ended.
type End struct {
	Outcome    Outcome
	DenyReason DenyReason // with OutcomeDenied
	// Err is why it did not complete: the start's error, fn's error or panic (*PanicError), or a
	// failed Complete. Nil for a completion, and for an execution marked failed by RecordError.
	Err error
}

// StartTrace follows one start; Hooks.StartBegan returns it. A nil func is not called. Each is
// called at most once, except BlockStarted, once per block attempt started.
type StartTrace struct {
	// Queued: the start took a ticket in its task's queue, at position (1: next).
	Queued func(position int)
	// Granted: the start was granted a slot. ctx is the context StartBegan returned; the context
	// it returns (nil: ctx) is the execution's: its values are those of Execution.Context and of
	// the context fn runs under.
	Granted func(ctx context.Context, g Grant) context.Context
	// BlockStarted: a block attempt started; the func it returns (nil: none) is called once when
	// the attempt ends, with nil for a completion, or the reason it failed or did not end before
	// the execution did.
	BlockStarted func(b BlockStart) func(err error)
	// SectionWait: the execution began waiting for its task's critical section; the func it
	// returns (nil: none) is called when the wait ends, with nil once the section is held.
	SectionWait func() func(err error)
	// Ended: the start ended: refused, failed, or its execution ended.
	Ended func(e End)
}

// errBlockNotEnded is the end of a block attempt still open when its execution ended.
var errBlockNotEnded = errors.New("taskling: the execution ended before the block attempt did")

// startObs is what the hooks observe of one start: the traces StartBegan returned, and the times
// the metrics need.
type startObs struct {
	c      *Client
	info   StartInfo
	traces []*StartTrace

	queuedAt time.Time // when its ticket was first queued, on the database clock (zero: never)
	queued   bool      // it took a ticket (even if its time is unknown)

	mu         sync.Mutex
	blocks     map[int]func(error) // block attempts whose end is not reported yet
	nextID     int
	ended      bool
	denyReason DenyReason // the reason Hooks.Denied was given ("": none)
}

// deniedFor notes the reason the start was denied with, as Hooks.Denied reported it.
func (o *startObs) deniedFor(reason DenyReason) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.denyReason = reason
	o.mu.Unlock()
}

// observe makes the observation of a start. trace: call StartBegan now (false for a critical
// section's start, which its execution's trace follows, and for a claim, traced once claimed).
func (c *Client) observe(ctx context.Context, info StartInfo, trace bool) (context.Context, *startObs) {
	o := &startObs{c: c, info: info}
	if trace {
		ctx = o.begin(ctx)
	}
	return ctx, o
}

// begin calls the StartBegan hooks.
func (o *startObs) begin(ctx context.Context) context.Context {
	o.c.hooks.each(func(h Hooks) {
		if h.StartBegan == nil {
			return
		}
		next, t := h.StartBegan(ctx, o.info)
		if next != nil {
			ctx = next
		}
		if t != nil {
			o.traces = append(o.traces, t)
		}
	})
	return ctx
}

// queue notes that the start took a ticket: at, when on the database clock (zero: unknown).
func (o *startObs) queue(at time.Time, position int) {
	if o.queued {
		if !at.IsZero() && (o.queuedAt.IsZero() || at.Before(o.queuedAt)) {
			o.queuedAt = at
		}
		return
	}
	o.queued, o.queuedAt = true, at
	for _, t := range o.traces {
		if t.Queued != nil {
			t.Queued(position)
		}
	}
}

// granted reports a grant to the hooks and returns the execution's context.
func (o *startObs) granted(ctx context.Context, app, task string, g Grant) context.Context {
	g.Queued = o.queued
	if o.queued && !o.queuedAt.IsZero() {
		g.Waited = max(0, g.StartedAt.Sub(o.queuedAt))
	}
	if o.info.WaitForSlot {
		o.c.hooks.waited(app, task, g.Waited)
	}
	if g.Attempt > 0 && !o.info.SubmittedAt.IsZero() {
		o.c.hooks.submissionWaited(app, task, max(0, g.StartedAt.Sub(o.info.SubmittedAt)))
	}
	for _, t := range o.traces {
		if t.Granted != nil {
			if next := t.Granted(ctx, g); next != nil {
				ctx = next
			}
		}
	}
	return ctx
}

// failed ends a start that was not granted: denied with the reason the hooks were given, else
// by what err wraps.
func (o *startObs) failed(err error) {
	e := End{Outcome: OutcomeError, Err: err}
	o.mu.Lock()
	reason := o.denyReason
	o.mu.Unlock()
	switch {
	case reason != "":
		e.Outcome, e.DenyReason = OutcomeDenied, reason
	case errors.Is(err, ErrKeyLimitReached): // before ErrLimitReached, which it wraps
		e.Outcome, e.DenyReason = OutcomeDenied, DenyKeyLimit
	case errors.Is(err, ErrLimitReached):
		e.Outcome, e.DenyReason = OutcomeDenied, DenyLimit
	case errors.Is(err, ErrRateLimited):
		e.Outcome, e.DenyReason = OutcomeDenied, rateReason(err)
	case errors.Is(err, ErrTaskRetired):
		e.Outcome, e.DenyReason = OutcomeDenied, DenyRetired
	case errors.Is(err, ErrTaskDisabled):
		e.Outcome, e.DenyReason = OutcomeDenied, DenyDisabled
	case errors.Is(err, ErrDuplicateReference):
		e.Outcome, e.DenyReason = OutcomeDenied, DenyDuplicate
	}
	o.end(e)
}

// end reports the end once, closing the block attempts left open.
func (o *startObs) end(e End) {
	o.mu.Lock()
	if o.ended {
		o.mu.Unlock()
		return
	}
	o.ended = true
	open := o.blocks
	o.blocks = nil
	o.mu.Unlock()
	for _, done := range open {
		done(errBlockNotEnded)
	}
	for _, t := range o.traces {
		if t.Ended != nil {
			t.Ended(e)
		}
	}
}

// blockStarted reports a block attempt's start; the func it returns reports its end (once).
func (o *startObs) blockStarted(b BlockStart) func(error) {
	if o == nil || len(o.traces) == 0 {
		return nil
	}
	var ends []func(error)
	for _, t := range o.traces {
		if t.BlockStarted != nil {
			if done := t.BlockStarted(b); done != nil {
				ends = append(ends, done)
			}
		}
	}
	if len(ends) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		for _, done := range ends {
			done(errBlockNotEnded)
		}
		return nil
	}
	if o.blocks == nil {
		o.blocks = map[int]func(error){}
	}
	id := o.nextID
	o.nextID++
	var once sync.Once
	done := func(err error) {
		once.Do(func() {
			for _, end := range ends {
				end(err)
			}
		})
	}
	o.blocks[id] = done
	return func(err error) {
		o.mu.Lock()
		delete(o.blocks, id)
		o.mu.Unlock()
		done(err)
	}
}

// sectionWait reports the start of a wait for the critical section; the func reports its end.
func (o *startObs) sectionWait() func(error) {
	if o == nil || len(o.traces) == 0 {
		return func(error) {}
	}
	var ends []func(error)
	for _, t := range o.traces {
		if t.SectionWait != nil {
			if done := t.SectionWait(); done != nil {
				ends = append(ends, done)
			}
		}
	}
	return func(err error) {
		for _, end := range ends {
			end(err)
		}
	}
}

// runOutcome is how an execution that was granted ended.
func runOutcome(runErr error, failed, leaseLost bool) Outcome {
	var p *PanicError
	switch {
	case leaseLost:
		return OutcomeLeaseLost
	case errors.As(runErr, &p):
		return OutcomePanicked
	case failed:
		return OutcomeFailed
	}
	return OutcomeCompleted
}

// MaxTracestateLength is the longest tracestate stored, in bytes (the W3C limit is 512).
const MaxTracestateLength = 512

// ValidateTraceContext checks a trace context as Submit does: zero, or a traceparent of the W3C
// Trace Context format ("00-" 32 lowercase hex digits, not all zero, "-" 16 more, not all zero,
// "-" 2 more; a later version may add "-" and more printable ASCII after those 55 characters, 200
// bytes at most in all; version ff is invalid) and a tracestate of at most MaxTracestateLength printable ASCII characters. A
// tracestate needs a traceparent. The error wraps ErrInvalidArgument and names field.
func ValidateTraceContext(field string, t TraceContext) error {
	if t.IsZero() {
		return nil
	}
	if why := traceparentProblem(t.Traceparent); why != "" {
		return fmt.Errorf("%w: %s.Traceparent %s", ErrInvalidArgument, field, why)
	}
	if len(t.Tracestate) > MaxTracestateLength {
		return fmt.Errorf("%w: %s.Tracestate is %d bytes; at most %d allowed", ErrInvalidArgument, field, len(t.Tracestate), MaxTracestateLength)
	}
	for i := 0; i < len(t.Tracestate); i++ {
		if c := t.Tracestate[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: %s.Tracestate has a byte 0x%02x at %d; want printable ASCII", ErrInvalidArgument, field, c, i)
		}
	}
	return nil
}

// traceparentProblem says what is wrong with a traceparent ("" if nothing).
func traceparentProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) < 55 || (len(s) > 55 && s[55] != '-') || (s[:2] == "00" && len(s) != 55):
		return fmt.Sprintf("is %q; want 00-<32 hex>-<16 hex>-<2 hex>", truncateForError(s))
	case s[2] != '-' || s[35] != '-' || s[52] != '-':
		return fmt.Sprintf("is %q; want its fields separated by '-'", truncateForError(s))
	case s[:2] == "ff":
		return "has version ff, which is invalid"
	}
	for _, f := range [][2]int{{0, 2}, {3, 35}, {36, 52}, {53, 55}} {
		for _, c := range s[f[0]:f[1]] {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return fmt.Sprintf("is %q; want lowercase hexadecimal digits", truncateForError(s))
			}
		}
	}
	if strings.Trim(s[3:35], "0") == "" || strings.Trim(s[36:52], "0") == "" {
		return "has an all-zero trace id or parent id"
	}
	if len(s) > 200 {
		return fmt.Sprintf("is %d bytes; at most 200 allowed", len(s))
	}
	// What a later version adds is stored as text: never a NUL byte or invalid UTF-8.
	for i := 55; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c > 0x7e {
			return fmt.Sprintf("has a byte 0x%02x at %d; want printable ASCII", c, i)
		}
	}
	return ""
}

func truncateForError(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

package tasklingotel

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskling-go/taskling/taskling"
)

// Span names.
const (
	SpanStart       = "taskling.start"
	SpanWait        = "taskling.wait"
	SpanRun         = "taskling.run"
	SpanBlock       = "taskling.block"
	SpanSectionWait = "taskling.critical_section.wait"
)

// Attribute keys of the spans (the instruments use AttrTask, AttrOutcome, AttrDenyReason and a
// few of their own: see docs/metrics.md).
const (
	AttrApplication   = attribute.Key("taskling.application")
	AttrTask          = attribute.Key("taskling.task") // "application/task"
	AttrStartKind     = attribute.Key("taskling.start.kind")
	AttrExecutionID   = attribute.Key("taskling.execution.id")
	AttrFencingToken  = attribute.Key("taskling.fencing_token")
	AttrAttempt       = attribute.Key("taskling.attempt")
	AttrSubmissionID  = attribute.Key("taskling.submission.id")
	AttrScheduledFor  = attribute.Key("taskling.scheduled_for")
	AttrQueuePosition = attribute.Key("taskling.queue.position")
	AttrOutcome       = attribute.Key("taskling.outcome")
	AttrDenyReason    = attribute.Key("taskling.deny_reason")
	AttrBlockID       = attribute.Key("taskling.block.id")
	AttrBlockKind     = attribute.Key("taskling.block.kind")
	AttrBlockAttempt  = attribute.Key("taskling.block.attempt")
	AttrBlockForced   = attribute.Key("taskling.block.forced")
	// AttrKey is a keyed start's key (StartOptions.Key); AttrCost the slots a keyed or weighted
	// start asks for (StartOptions.Cost, 1 when not given). A start with neither has neither.
	AttrKey  = attribute.Key("taskling.key")
	AttrCost = attribute.Key("taskling.cost")
)

// started follows one start's spans.
type started struct {
	t     *Telemetry
	info  taskling.StartInfo
	start trace.Span

	mu        sync.Mutex
	wait      trace.Span
	run       trace.Span
	runCtx    context.Context
	grantedAt time.Time
}

// startBegan is Hooks.StartBegan: the start's span, a child of ctx's span (an attempt: the root
// of its own trace, linked to the submitter's span, or its child with AttemptsAsChildren).
func (t *Telemetry) startBegan(ctx context.Context, info taskling.StartInfo) (context.Context, *taskling.StartTrace) {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, AttrApplication.String(info.Application), AttrTask.String(info.Application+"/"+info.Task),
		AttrStartKind.String(string(info.Kind)))
	if info.Key != "" || info.Cost > 1 {
		if info.Key != "" {
			attrs = append(attrs, AttrKey.String(info.Key))
		}
		attrs = append(attrs, AttrCost.Int(max(info.Cost, 1)))
	}
	if !info.ScheduledFor.IsZero() {
		attrs = append(attrs, AttrScheduledFor.String(info.ScheduledFor.UTC().Format(time.RFC3339Nano)))
	}
	kind := trace.SpanKindInternal
	opts := []trace.SpanStartOption{trace.WithTimestamp(info.At)}
	if info.SubmissionID != 0 {
		kind = trace.SpanKindConsumer
		attrs = append(attrs, AttrSubmissionID.Int64(info.SubmissionID))
		if t.opts.MessagingConventions {
			attrs = append(attrs, attribute.String("messaging.system", "taskling"),
				attribute.String("messaging.operation.type", "process"), attribute.String("messaging.operation.name", "work"),
				attribute.String("messaging.destination.name", info.Application+"/"+info.Task),
				attribute.String("messaging.message.id", strconv.FormatInt(info.SubmissionID, 10)))
		}
		if sc := t.remote(info.SubmissionTrace); sc.IsValid() {
			if t.opts.AttemptsAsChildren {
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			} else {
				opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc,
					Attributes: []attribute.KeyValue{attribute.String("taskling.link", "submitted")}}))
			}
		}
	}
	opts = append(opts, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	ctx, span := t.tracer.Start(ctx, SpanStart, opts...)
	s := &started{t: t, info: info, start: span}
	return ctx, &taskling.StartTrace{Queued: s.queued, Granted: s.granted, BlockStarted: s.blockStarted,
		SectionWait: s.sectionWait, Ended: s.ended}
}

func (s *started) queued(position int) {
	_, wait := s.t.tracer.Start(trace.ContextWithSpan(context.Background(), s.start), SpanWait,
		trace.WithAttributes(AttrQueuePosition.Int(position)))
	s.mu.Lock()
	s.wait = wait
	s.mu.Unlock()
}

func (s *started) granted(ctx context.Context, g taskling.Grant) context.Context {
	now := time.Now()
	attrs := []attribute.KeyValue{AttrExecutionID.Int64(g.ExecutionID), AttrFencingToken.Int64(g.FencingToken)}
	if g.Attempt > 0 {
		attrs = append(attrs, AttrAttempt.Int(g.Attempt))
	}
	s.start.SetAttributes(attrs...)
	if s.info.Kind == taskling.StartAttempt {
		s.t.metrics.consumed(s.info)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grantedAt = now
	if s.wait != nil {
		s.wait.End(trace.WithTimestamp(now))
		s.wait = nil
	}
	s.runCtx, s.run = s.t.tracer.Start(trace.ContextWithSpan(ctx, s.start), SpanRun, trace.WithTimestamp(now),
		trace.WithAttributes(AttrExecutionID.Int64(g.ExecutionID)))
	return s.runCtx
}

// child starts a span under the run (under the start if there is no run).
func (s *started) child(name string, attrs ...attribute.KeyValue) trace.Span {
	s.mu.Lock()
	ctx := s.runCtx
	s.mu.Unlock()
	if ctx == nil {
		ctx = trace.ContextWithSpan(context.Background(), s.start)
	}
	_, span := s.t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	return span
}

func (s *started) blockStarted(b taskling.BlockStart) func(error) {
	span := s.child(SpanBlock, AttrBlockID.Int64(b.ID), AttrBlockKind.String(b.Kind.String()),
		AttrBlockAttempt.Int(b.Attempt), AttrBlockForced.Bool(b.Forced))
	return func(err error) { endSpan(span, err) }
}

func (s *started) sectionWait() func(error) {
	span := s.child(SpanSectionWait)
	return func(err error) { endSpan(span, err) }
}

// ended ends the start's spans with its outcome.
func (s *started) ended(e taskling.End) {
	attrs := []attribute.KeyValue{AttrOutcome.String(string(e.Outcome))}
	if e.DenyReason != "" {
		attrs = append(attrs, AttrDenyReason.String(string(e.DenyReason)))
	}
	bad := e.Outcome != taskling.OutcomeCompleted && e.Outcome != taskling.OutcomeDenied
	s.mu.Lock()
	wait, run, grantedAt := s.wait, s.run, s.grantedAt
	s.wait, s.run = nil, nil
	s.mu.Unlock()
	if run != nil && s.info.Kind == taskling.StartAttempt {
		s.t.metrics.processed(s.info, e, time.Since(grantedAt))
	}
	if wait != nil {
		wait.SetAttributes(attrs...)
		wait.End()
	}
	for _, span := range []trace.Span{run, s.start} {
		if span == nil {
			continue
		}
		span.SetAttributes(attrs...)
		if bad {
			recordError(span, e.Err)
			span.SetStatus(codes.Error, describe(e))
		}
		span.End()
	}
}

// describe is an end's status description.
func describe(e taskling.End) string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return string(e.Outcome)
}

// recordError records err on span as an exception event; a panic's with its stack.
func recordError(span trace.Span, err error) {
	if err == nil {
		return
	}
	var p *taskling.PanicError
	if errors.As(err, &p) {
		span.RecordError(err, trace.WithAttributes(attribute.String("exception.stacktrace", string(p.Stack))))
		return
	}
	span.RecordError(err)
}

// endSpan ends a child span, in error when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

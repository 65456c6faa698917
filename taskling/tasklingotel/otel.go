package tasklingotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskling-go/taskling/taskling"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/taskling-go/taskling/taskling/tasklingotel"

// Options configure New. A nil *Options, or a zero field, means the documented default.
type Options struct {
	// TracerProvider makes the spans. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes the trace context Submit stores and reads it back for the attempts.
	// Default propagation.TraceContext{} (W3C traceparent and tracestate); only its traceparent
	// and tracestate fields are stored.
	Propagator propagation.TextMapPropagator
	// AttemptsAsChildren makes each attempt's taskling.start span a child of the span that
	// submitted it (one trace from the submit to every attempt) instead of the root of a trace of
	// its own that links to it.
	AttemptsAsChildren bool
	// MessagingConventions adds OpenTelemetry's messaging semantic conventions: the instruments
	// messaging.process.duration and messaging.client.consumed.messages, and messaging.*
	// attributes on the spans of attempts. The taskling.* instruments and attributes stay.
	MessagingConventions bool
}

// Telemetry is the tracing and the instruments of one Client.
type Telemetry struct {
	client  *taskling.Client
	opts    Options
	tracer  trace.Tracer
	metrics *instruments
}

// New traces client's starts and exports its metrics, through client.AddHooks (hooks cannot be
// removed: call New once per client). Close unregisters the gauges' callback.
func New(client *taskling.Client, opts *Options) (*Telemetry, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: tasklingotel: client is nil", taskling.ErrInvalidArgument)
	}
	t := &Telemetry{client: client}
	if opts != nil {
		t.opts = *opts
	}
	if t.opts.TracerProvider == nil {
		t.opts.TracerProvider = otel.GetTracerProvider()
	}
	if t.opts.MeterProvider == nil {
		t.opts.MeterProvider = otel.GetMeterProvider()
	}
	if t.opts.Propagator == nil {
		t.opts.Propagator = propagation.TraceContext{}
	}
	t.tracer = t.opts.TracerProvider.Tracer(ScopeName)
	var err error
	if t.metrics, err = newInstruments(client, t.opts); err != nil {
		return nil, fmt.Errorf("tasklingotel: instruments: %w", err)
	}
	hooks := t.metrics.hooks()
	hooks.TraceContext = t.traceContext
	hooks.StartBegan = t.startBegan
	client.AddHooks(hooks)
	return t, nil
}

// Close unregisters the callback of the gauges read from the database. The spans and counters
// go on (a client's hooks cannot be removed).
func (t *Telemetry) Close() error {
	if t.metrics.registration == nil {
		return nil
	}
	return t.metrics.registration.Unregister()
}

// traceContext is Hooks.TraceContext: the W3C trace context of ctx's span, as the propagator
// writes it.
func (t *Telemetry) traceContext(ctx context.Context) taskling.TraceContext {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return taskling.TraceContext{}
	}
	carrier := propagation.MapCarrier{}
	t.opts.Propagator.Inject(ctx, carrier)
	return taskling.TraceContext{Traceparent: carrier.Get("traceparent"), Tracestate: carrier.Get("tracestate")}
}

// remote is the span context a stored trace context names (invalid when none).
func (t *Telemetry) remote(tc taskling.TraceContext) trace.SpanContext {
	if tc.IsZero() {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": tc.Traceparent}
	if tc.Tracestate != "" {
		carrier["tracestate"] = tc.Tracestate
	}
	return trace.SpanContextFromContext(t.opts.Propagator.Extract(context.Background(), carrier))
}

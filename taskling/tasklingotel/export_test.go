package tasklingotel

import (
	"context"

	"go.opentelemetry.io/otel/propagation"

	"github.com/taskling-go/taskling/taskling"
)

// HooksForTest are hooks that feed t's instruments as the client's do.
func (t *Telemetry) HooksForTest() taskling.Hooks { return t.metrics.hooks() }

// StartBeganForTest is the StartBegan hook of t.
func (t *Telemetry) StartBeganForTest() func(ctx context.Context, s taskling.StartInfo) (context.Context, *taskling.StartTrace) {
	return t.startBegan
}

// NewForBenchmark is a Telemetry with no client: its StartBegan hook alone, for benchmarks.
func NewForBenchmark(opts *Options) *Telemetry {
	t := &Telemetry{opts: *opts}
	t.metrics = &instruments{}
	if t.opts.Propagator == nil {
		t.opts.Propagator = propagation.TraceContext{}
	}
	t.tracer = t.opts.TracerProvider.Tracer(ScopeName)
	return t
}

package tasklingotel_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingotel"
)

type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracingOneStart is the CPU a traced start costs in the process, without the database:
// the hooks a granted start that completes calls (its taskling.start and taskling.run spans, their
// attributes), with the AlwaysOn sampler and a batching span processor in front of an exporter
// that drops the spans, or of the in-memory exporter; and with a no-op TracerProvider.
func BenchmarkTracingOneStart(b *testing.B) {
	for _, c := range []struct {
		name string
		tp   func() (func(), *tasklingotel.Options)
	}{
		{"noop provider", func() (func(), *tasklingotel.Options) {
			return func() {}, &tasklingotel.Options{TracerProvider: noop.NewTracerProvider()}
		}},
		{"AlwaysOn, batched, no-op exporter", func() (func(), *tasklingotel.Options) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropSpans{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			return func() { _ = tp.Shutdown(context.Background()) }, &tasklingotel.Options{TracerProvider: tp}
		}},
		{"AlwaysOn, batched, in-memory exporter", func() (func(), *tasklingotel.Options) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewInMemoryExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			return func() { _ = tp.Shutdown(context.Background()) }, &tasklingotel.Options{TracerProvider: tp}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			done, opts := c.tp()
			defer done()
			tel := tasklingotel.NewForBenchmark(opts)
			began := tel.StartBeganForTest()
			ctx := context.Background()
			info := taskling.StartInfo{Application: "bench", Task: "task-0", Kind: taskling.StartDirect, At: time.Now()}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					sctx, st := began(ctx, info)
					st.Granted(sctx, taskling.Grant{ExecutionID: 1, FencingToken: 1, StartedAt: info.At})
					st.Ended(taskling.End{Outcome: taskling.OutcomeCompleted})
				}
			})
		})
	}
}

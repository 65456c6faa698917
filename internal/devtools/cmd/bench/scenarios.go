package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingotel"
)

// scenario is one measured configuration at one isolation level.
type scenario struct {
	name     string
	kind     string // the configuration, without the isolation level
	iso      taskling.Isolation
	maxConns int32 // the pool's size; 0: pgxpool's default, as a user gets it
	run      func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error)
}

// Kinds of scenarios, as the report refers to them.
const (
	floor1      = "floor, 1 goroutine(s)"
	floor16     = "floor, 16 goroutine(s)"
	floor64     = "floor, 64 goroutines × 64 tasks, + execution rows"
	uncontended = "1 goroutine(s), 1 task(s)"
	oneTask16   = "16 goroutine(s), 1 task(s)"
	tasks64     = "64 goroutine(s), 64 task(s)"
	processes   = "4 processes × 4 goroutines"
	waiting     = "limit 4, 16 goroutines waiting"
	// The cost of tracing (issue 28): oneTask16 traced by tasklingotel with the AlwaysOn sampler,
	// its spans batched to an exporter that drops them, or to the SDK's in-memory exporter.
	tracedNoop   = "16 goroutine(s), 1 task(s), traced, no-op exporter"
	tracedMemory = "16 goroutine(s), 1 task(s), traced, batching in-memory exporter"
)

var isolations = []taskling.Isolation{taskling.IsolationSerializable, taskling.IsolationReadCommitted}

func isoName(i taskling.Isolation) string {
	if i == taskling.IsolationReadCommitted {
		return "read committed"
	}
	return "serializable"
}

func pgxLevel(i taskling.Isolation) pgx.TxIsoLevel {
	if i == taskling.IsolationReadCommitted {
		return pgx.ReadCommitted
	}
	return pgx.Serializable
}

// allScenarios lists every scenario, each configuration at both isolation levels in a row.
func allScenarios() []scenario {
	var out []scenario
	add := func(kind string, maxConns int32, run func(iso taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error)) {
		for _, iso := range isolations {
			prefix := "taskling "
			if kind == floor1 || kind == floor16 || kind == floor64 {
				prefix = ""
			}
			name := prefix + kind + " (" + isoName(iso) + ")"
			out = append(out, scenario{name: name, kind: kind, iso: iso, maxConns: maxConns, run: run(iso)})
		}
	}
	floor := func(g int, rows bool) func(taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
		return func(iso taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
			return func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error) {
				if rows {
					return bench.RawTasks(ctx, pool, pgxLevel(iso), g, e.d)
				}
				return bench.Raw(ctx, pool, pgxLevel(iso), g, e.d)
			}
		}
	}
	cycles := func(g, tasks int) func(taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
		return func(iso taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
			return func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error) {
				client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso, Defaults: bench.Settings(g, tasks)})
				if err != nil {
					return bench.Result{}, err
				}
				defer client.Close()
				return bench.Taskling(ctx, client, "bench", g, tasks, e.d)
			}
		}
	}
	add(floor1, 80, floor(1, false))
	add(floor16, 80, floor(16, false))
	add(floor64, 80, floor(64, true))
	add(uncontended, 0, cycles(1, 1))
	add(oneTask16, 0, cycles(16, 1))
	add(tracedNoop, 0, traced(16, 1, func() sdktrace.SpanExporter { return noopExporter{} }))
	add(tracedMemory, 0, traced(16, 1, func() sdktrace.SpanExporter { return tracetest.NewInMemoryExporter() }))
	add(tasks64, 0, cycles(64, 64))
	add(processes, 0, func(iso taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
		return func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error) {
			return multiProcess(ctx, pool, 4, 4, iso, e.d)
		}
	})
	add(waiting, 0, func(iso taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
		return func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error) {
			client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso,
				Defaults: taskling.TaskSettings{ConcurrencyLimit: 4}})
			if err != nil {
				return bench.Result{}, err
			}
			defer client.Close()
			return bench.Waiting(ctx, client, "bench", 16, 4, e.d)
		}
	})
	return append(append(out, keyScenarios()...), rateScenarios()...)
}

// traced is the cycles of g goroutines over tasks tasks, traced by tasklingotel (AlwaysOn) into a
// batching span processor in front of the exporter made by exporter.
func traced(g, tasks int, exporter func() sdktrace.SpanExporter) func(taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
	return func(iso taskling.Isolation) func(context.Context, *environment, *pgxpool.Pool) (bench.Result, error) {
		return func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error) {
			client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso, Defaults: bench.Settings(g, tasks)})
			if err != nil {
				return bench.Result{}, err
			}
			defer client.Close()
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
			if _, err := tasklingotel.New(client, &tasklingotel.Options{TracerProvider: tp}); err != nil {
				return bench.Result{}, err
			}
			return bench.Taskling(ctx, client, "bench", g, tasks, e.d)
		}
	}
}

// noopExporter drops the spans it is given.
type noopExporter struct{}

func (noopExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (noopExporter) Shutdown(context.Context) error                             { return nil }

// ordered is the order of run r: every configuration in turn, its two isolation levels in an
// order that alternates between runs.
func ordered(scenarios []scenario, r int) []scenario {
	out := make([]scenario, len(scenarios))
	copy(out, scenarios)
	if r%2 == 1 {
		for i := 0; i+1 < len(out); i += 2 {
			out[i], out[i+1] = out[i+1], out[i]
		}
	}
	return out
}

func (s scenario) String() string { return fmt.Sprintf("%s (%s)", s.kind, isoName(s.iso)) }

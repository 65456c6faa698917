// Command telemetry shows one job's trace joined across two processes: a submitter submits it
// under a span of its own ("POST /imports", as a web handler would), a worker runs it with Work
// in another process, and package tasklingotel carries the trace context through the database.
// Each process exports its spans to stdout as JSON, or to an OTLP/HTTP endpoint when
// OTEL_EXPORTER_OTLP_ENDPOINT is set (Jaeger, Tempo, an OpenTelemetry Collector: the standard
// OTEL_EXPORTER_OTLP_* variables apply).
//
//	scripts/with-db.sh go run ./examples/telemetry            # both processes, the joined trace printed
//	scripts/with-db.sh go run ./examples/telemetry -link      # the attempt in a trace of its own, linked
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 scripts/with-db.sh go run ./examples/telemetry
//
// With -role both (the default) it works in a database of its own that it creates and drops,
// runs itself with -role submitter, then with -role worker, reads the spans both printed and
// prints the trace as a tree. With -role submitter or -role worker it is that process alone, on
// the database you name.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingotel"
)

const app, task = "imports", "csv"

type config struct {
	dbURL      string
	link       bool  // the attempt's trace links to the submitter's instead of joining it
	submission int64 // the worker's: run until this submission ends
}

func main() {
	var cfg config
	role := flag.String("role", "both", "both (a submitter and a worker process, in a fresh database; prints the joined trace), submitter or worker")
	flag.StringVar(&cfg.dbURL, "database-url", os.Getenv("TASKLING_DATABASE_URL"), "PostgreSQL URL (default $TASKLING_DATABASE_URL)")
	flag.BoolVar(&cfg.link, "link", false, "the attempt's span starts a trace of its own, linked to the submitter's (the default of tasklingotel)")
	flag.Int64Var(&cfg.submission, "submission", 0, "-role worker: the submission to wait for")
	flag.Parse()
	log.SetFlags(0)
	if cfg.dbURL == "" {
		log.Fatal("telemetry: set -database-url or TASKLING_DATABASE_URL (or run it under scripts/with-db.sh)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch *role {
	case "both":
		err = both(ctx, cfg)
	case "submitter":
		err = submitter(ctx, cfg)
	case "worker":
		err = worker(ctx, cfg)
	default:
		err = fmt.Errorf("-role is %q; want both, submitter or worker", *role)
	}
	if err != nil {
		log.Fatalf("telemetry: %v", err)
	}
}

// tracing is a TracerProvider that exports to stdout (JSON, one span per line), or over OTLP/HTTP
// when OTEL_EXPORTER_OTLP_ENDPOINT is set.
func tracing(ctx context.Context, service string) (*sdktrace.TracerProvider, error) {
	var exporter sdktrace.SpanExporter
	var err error
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exporter, err = otlptracehttp.New(ctx)
	} else {
		exporter, err = stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	}
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample())), nil
}

// open connects, migrates and makes a traced client.
func open(ctx context.Context, cfg config, host string, tp *sdktrace.TracerProvider) (*taskling.Client, func(), error) {
	pool, err := pgxpool.New(ctx, cfg.dbURL)
	if err != nil {
		return nil, nil, err
	}
	if err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: host})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	if _, err := tasklingotel.New(client, &tasklingotel.Options{TracerProvider: tp, AttemptsAsChildren: !cfg.link}); err != nil {
		client.Close()
		pool.Close()
		return nil, nil, err
	}
	return client, func() { client.Close(); pool.Close() }, nil
}

// submitter submits one import under the span of the request that asks for it, and prints the
// submission's id on stderr ("submission N").
func submitter(ctx context.Context, cfg config) error {
	tp, err := tracing(ctx, "telemetry-submitter")
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	client, closeAll, err := open(ctx, cfg, "submitter", tp)
	if err != nil {
		return err
	}
	defer closeAll()
	reqCtx, span := tp.Tracer("webapp").Start(ctx, "POST /imports")
	id, err := client.Submit(reqCtx, app, task, &taskling.SubmitOptions{Header: map[string]int{"rows": 300}})
	span.End()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "submission %d, trace %s\n", id, span.SpanContext().TraceID())
	return nil
}

// worker runs the imports with Work until submission cfg.submission has ended: three blocks of
// rows, with progress.
func worker(ctx context.Context, cfg config) error {
	tp, err := tracing(ctx, "telemetry-worker")
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
	client, closeAll, err := open(ctx, cfg, "worker", tp)
	if err != nil {
		return err
	}
	defer closeAll()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- client.Work(wctx, app, task, importRows, nil) }()
	for {
		sub, err := client.Submission(ctx, cfg.submission)
		if err != nil {
			return err
		}
		if sub.FinishedAt != nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	return <-done
}

// importRows is the job: its rows in blocks of 100, each block a span of its own.
func importRows(ctx context.Context, e *taskling.Execution) error {
	var job struct{ Rows int64 }
	if err := e.Header(&job); err != nil {
		return err
	}
	blocks, err := e.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: job.Rows, MaxSize: 100}, nil)
	if err != nil {
		return err
	}
	for i, b := range blocks {
		if err := b.Start(ctx); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // the rows' work
		if err := b.Complete(ctx, b.To-b.From+1); err != nil {
			return err
		}
		if err := e.SetProgress(ctx, int64(i+1)*100, job.Rows); err != nil {
			return err
		}
	}
	return nil
}

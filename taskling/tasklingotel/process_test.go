package tasklingotel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingotel"
)

// The worker of TestAnAttemptInAnotherProcessJoinsTheSubmittersTrace is this test binary run
// again with these variables set: it runs Work until the submission completes and writes the
// spans it exported (an in-memory exporter, AlwaysOn) to a file as JSON.
const (
	childRoleEnv = "TASKLINGOTEL_CHILD" // "link" or "child" (Options.AttemptsAsChildren)
	childDBEnv   = "TASKLINGOTEL_DB"
	childSubEnv  = "TASKLINGOTEL_SUBMISSION"
	childOutEnv  = "TASKLINGOTEL_OUT"
)

func childRole() string { return os.Getenv(childRoleEnv) }

// exported is a span as the worker reports it.
type exported struct {
	Name     string            `json:"name"`
	TraceID  string            `json:"trace_id"`
	SpanID   string            `json:"span_id"`
	ParentID string            `json:"parent_id"` // "" for a root
	Links    [][2]string       `json:"links"`     // trace id, span id
	Attrs    map[string]string `json:"attrs"`
}

func runChild(role string) {
	if err := child(role); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func child(role string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := strconv.ParseInt(os.Getenv(childSubEnv), 10, 64)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, os.Getenv(childDBEnv))
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "worker", CleanupInterval: -1})
	if err != nil {
		return err
	}
	defer client.Close()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	if _, err := tasklingotel.New(client, &tasklingotel.Options{TracerProvider: tp, AttemptsAsChildren: role == "child"}); err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- client.Work(wctx, "app", "jobs", func(ctx context.Context, e *taskling.Execution) error {
			_, s := tp.Tracer("worker").Start(ctx, "import rows")
			s.End()
			return nil
		}, nil)
	}()
	for {
		sub, err := client.Submission(ctx, id)
		if err != nil {
			return err
		}
		if sub.Status == taskling.SubmissionCompleted {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	var out []exported
	for _, s := range spans.GetSpans() {
		e := exported{Name: s.Name, TraceID: s.SpanContext.TraceID().String(), SpanID: s.SpanContext.SpanID().String(),
			Attrs: map[string]string{}}
		if s.Parent.IsValid() {
			e.ParentID = s.Parent.SpanID().String()
		}
		for _, l := range s.Links {
			e.Links = append(e.Links, [2]string{l.SpanContext.TraceID().String(), l.SpanContext.SpanID().String()})
		}
		for _, kv := range s.Attributes {
			e.Attrs[string(kv.Key)] = kv.Value.Emit()
		}
		out = append(out, e)
	}
	if err := tp.Shutdown(ctx); err != nil { // (it empties the exporter)
		return err
	}
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(os.Getenv(childOutEnv), data, 0o600)
}

// runWorker runs the worker process for submission id and returns its spans.
func runWorker(t *testing.T, url, role string, id int64) []exported {
	t.Helper()
	out := filepath.Join(t.TempDir(), "spans.json")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childDBEnv+"="+url, childSubEnv+"="+strconv.FormatInt(id, 10), childOutEnv+"="+out)
	output, err := cmd.CombinedOutput()
	require.NoError(t, err, "worker:\n%s", output)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var spans []exported
	require.NoError(t, json.Unmarshal(data, &spans))
	return spans
}

// TestAnAttemptInAnotherProcessJoinsTheSubmittersTrace: a submission made under a span in this
// process is run by Work in another process. Its attempt's taskling.start span there is the root
// of its own trace with a link to the submitter's span, or, with AttemptsAsChildren, that span's
// child in the submitter's trace; its run and the spans fn makes hang under it.
func TestAnAttemptInAnotherProcessJoinsTheSubmittersTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	for _, role := range []string{"link", "child"} {
		ctx, submitter := b.provider.Tracer("web").Start(b.ctx, "POST /upload")
		id, err := b.client.Submit(ctx, "app", "jobs", nil)
		require.NoError(t, err)
		submitter.End()
		sc := submitter.SpanContext()

		spans := runWorker(t, b.url, role, id)
		byName := map[string]exported{}
		for _, s := range spans {
			byName[s.Name] = s
		}
		start, run, work := byName[tasklingotel.SpanStart], byName[tasklingotel.SpanRun], byName["import rows"]
		require.NotEmpty(t, start.SpanID, "%s: spans %v", role, spans)
		require.Equal(t, strconv.FormatInt(id, 10), start.Attrs[string(tasklingotel.AttrSubmissionID)])
		require.Equal(t, "1", start.Attrs[string(tasklingotel.AttrAttempt)])
		require.Equal(t, "attempt", start.Attrs[string(tasklingotel.AttrStartKind)])
		require.Equal(t, "completed", start.Attrs[string(tasklingotel.AttrOutcome)])
		require.Equal(t, start.SpanID, run.ParentID)
		require.Equal(t, run.SpanID, work.ParentID)
		require.Equal(t, start.TraceID, work.TraceID)
		switch role {
		case "link":
			require.Empty(t, start.ParentID, "a root of its own")
			require.NotEqual(t, sc.TraceID().String(), start.TraceID)
			require.Equal(t, [][2]string{{sc.TraceID().String(), sc.SpanID().String()}}, start.Links)
		case "child":
			require.Equal(t, sc.SpanID().String(), start.ParentID)
			require.Equal(t, sc.TraceID().String(), start.TraceID)
			require.Empty(t, start.Links)
		}
		if role == "child" {
			t.Logf("joined trace %s:\n  %s (this process)\n    %s (worker) attempt %s, submission %s\n      %s\n        %s",
				sc.TraceID(), "POST /upload", start.Name, start.Attrs["taskling.attempt"], start.Attrs["taskling.submission.id"], run.Name, work.Name)
		}
	}
}

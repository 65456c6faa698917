package tasklingotel_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingotel"
)

func TestMain(m *testing.M) {
	if role := childRole(); role != "" {
		runChild(role) // exits
	}
	testutil.VerifyNoLeaks(m)
}

// bundle is a client traced into an in-memory exporter (AlwaysOn sampler, spans exported as they
// end), with a manual metric reader.
type bundle struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	url      string
	client   *taskling.Client
	spans    *tracetest.InMemoryExporter
	provider *sdktrace.TracerProvider
	reader   *sdkmetric.ManualReader
	tel      *tasklingotel.Telemetry
}

func setup(t *testing.T, cfg *taskling.Config, opts *tasklingotel.Options) *bundle {
	t.Helper()
	pool, url := pgtest.NewDB(t)
	b := &bundle{ctx: context.Background(), pool: pool, url: url}
	b.client, b.spans, b.provider, b.reader, b.tel = newTraced(t, pool, cfg, opts)
	return b
}

func newTraced(t *testing.T, pool *pgxpool.Pool, cfg *taskling.Config, opts *tasklingotel.Options) (*taskling.Client,
	*tracetest.InMemoryExporter, *sdktrace.TracerProvider, *sdkmetric.ManualReader, *tasklingotel.Telemetry) {
	t.Helper()
	if cfg == nil {
		cfg = &taskling.Config{}
	}
	if cfg.HostName == "" {
		cfg.HostName = "test-host"
	}
	cfg.CleanupInterval = -1
	client, err := taskling.NewClient(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o := tasklingotel.Options{}
	if opts != nil {
		o = *opts
	}
	o.TracerProvider, o.MeterProvider = tp, mp
	tel, err := tasklingotel.New(client, &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Close() })
	return client, spans, tp, reader, tel
}

// named returns the ended spans called name, in the order they started.
func (b *bundle) named(name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range b.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartTime.Before(out[j].StartTime) })
	return out
}

// attrs maps a span's attributes.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		out[kv.Key] = kv.Value
	}
	return out
}

// childrenOf returns the spans whose parent is s.
func (b *bundle) childrenOf(s tracetest.SpanStub) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, c := range b.spans.GetSpans() {
		if c.Parent.SpanID() == s.SpanContext.SpanID() && c.Parent.TraceID() == s.SpanContext.TraceID() {
			out = append(out, c)
		}
	}
	return out
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestAWaitedStartHasWaitAndRunUnderTheCallersSpan: a start granted at once has a run and no
// wait; a WaitForSlot start that queued behind it has a wait (with its queue position) and a
// run, both children of its taskling.start, itself the child of the caller's span; the run is
// the parent of the spans fn makes; attributes say the task, execution, fence and outcome.
func TestAWaitedStartHasWaitAndRunUnderTheCallersSpan(t *testing.T) {
	t.Parallel()
	b := setup(t, &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 1}}, nil)
	first, err := b.client.StartExecution(b.ctx, "app", "task", nil)
	require.NoError(t, err)

	caller, parent := b.provider.Tracer("test").Start(b.ctx, "handler")
	got := make(chan error, 1)
	go func() {
		got <- b.client.Run(caller, "app", "task", func(ctx context.Context, e *taskling.Execution) error {
			_, inner := b.provider.Tracer("test").Start(ctx, "inner work")
			inner.End()
			return nil
		}, &taskling.StartOptions{WaitForSlot: true})
	}()
	require.Eventually(t, func() bool {
		info, err := b.client.Task(b.ctx, "app", "task")
		return err == nil && info.Waiting == 1
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // a wait long enough to see
	require.NoError(t, first.Complete(b.ctx))
	require.NoError(t, <-got)
	parent.End()

	starts := b.named(tasklingotel.SpanStart)
	require.Len(t, starts, 2)
	plain, waited := starts[0], starts[1]
	require.Equal(t, []string{tasklingotel.SpanRun}, names(b.childrenOf(plain)), "granted at once: no wait")
	require.False(t, plain.Parent.IsValid(), "no span in its context: a root")
	require.Equal(t, parent.SpanContext().SpanID(), waited.Parent.SpanID(), "the caller's span is the parent")
	require.Equal(t, parent.SpanContext().TraceID(), waited.SpanContext.TraceID())
	require.ElementsMatch(t, []string{tasklingotel.SpanWait, tasklingotel.SpanRun}, names(b.childrenOf(waited)))

	a := attrs(waited)
	require.Equal(t, "app", a[tasklingotel.AttrApplication].AsString())
	require.Equal(t, "app/task", a[tasklingotel.AttrTask].AsString())
	require.Equal(t, "start", a[tasklingotel.AttrStartKind].AsString())
	require.Equal(t, "completed", a[tasklingotel.AttrOutcome].AsString())
	require.Equal(t, first.FencingToken()+1, a[tasklingotel.AttrFencingToken].AsInt64())
	require.Positive(t, a[tasklingotel.AttrExecutionID].AsInt64())
	require.Equal(t, codes.Unset, waited.Status.Code)

	wait := b.named(tasklingotel.SpanWait)[0]
	require.Equal(t, int64(1), attrs(wait)[tasklingotel.AttrQueuePosition].AsInt64())
	require.GreaterOrEqual(t, wait.EndTime.Sub(wait.StartTime), 150*time.Millisecond)
	run := b.named(tasklingotel.SpanRun)[1]
	require.False(t, run.StartTime.Before(wait.EndTime), "the run starts when the wait ends")
	require.False(t, waited.EndTime.Before(run.EndTime), "the start spans the run")
	inner := b.named("inner work")[0]
	require.Equal(t, run.SpanContext.SpanID(), inner.Parent.SpanID(), "fn's spans are children of the run")
}

// TestFailurePanicAndLeaseLossAreErrors: a function's error, a panic (with its stack) and a lost
// lease each end the start and its run with status Error and their outcome; a denial is not an
// error and has no run.
func TestFailurePanicAndLeaseLossAreErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 1, DeathMode: taskling.DeathModeOverride,
		OverrideThreshold: 2 * time.Second}}, nil)
	boom := errors.New("boom")
	require.ErrorIs(t, b.client.Run(b.ctx, "app", "fail", func(context.Context, *taskling.Execution) error { return boom }, nil), boom)
	var p *taskling.PanicError
	require.ErrorAs(t, b.client.Run(b.ctx, "app", "panic", func(context.Context, *taskling.Execution) error { panic("oops") }, nil), &p)
	held, err := b.client.StartExecution(b.ctx, "app", "deny", nil)
	require.NoError(t, err)
	_, err = b.client.StartExecution(b.ctx, "app", "deny", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	require.NoError(t, held.Complete(b.ctx))
	err = b.client.Run(b.ctx, "app", "lease", func(ctx context.Context, _ *taskling.Execution) error {
		<-ctx.Done() // the override threshold passes: the lease is lost
		return nil
	}, nil)
	require.ErrorIs(t, err, taskling.ErrLeaseLost)

	byTask := map[string]tracetest.SpanStubs{}
	for _, s := range b.named(tasklingotel.SpanStart) {
		task := attrs(s)[tasklingotel.AttrTask].AsString()
		byTask[task] = append(byTask[task], s)
	}
	for task, want := range map[string]string{"app/fail": "failed", "app/panic": "panicked", "app/lease": "lease_lost"} {
		s := byTask[task][0]
		require.Equal(t, want, attrs(s)[tasklingotel.AttrOutcome].AsString(), task)
		require.Equal(t, codes.Error, s.Status.Code, task)
		run := b.childrenOf(s)
		require.Len(t, run, 1, task)
		require.Equal(t, codes.Error, run[0].Status.Code, task)
	}
	require.Equal(t, "boom", byTask["app/fail"][0].Status.Description)
	panicked := byTask["app/panic"][0]
	require.NotEmpty(t, panicked.Events)
	ev := map[attribute.Key]attribute.Value{}
	for _, kv := range panicked.Events[0].Attributes {
		ev[kv.Key] = kv.Value
	}
	require.Contains(t, ev["exception.stacktrace"].AsString(), "goroutine", "the panic's stack is recorded")

	denied := byTask["app/deny"]
	require.Len(t, denied, 2)
	require.Equal(t, "completed", attrs(denied[0])[tasklingotel.AttrOutcome].AsString())
	require.Equal(t, "denied", attrs(denied[1])[tasklingotel.AttrOutcome].AsString())
	require.Equal(t, "limit", attrs(denied[1])[tasklingotel.AttrDenyReason].AsString())
	require.Equal(t, codes.Unset, denied[1].Status.Code)
	require.Empty(t, b.childrenOf(denied[1]), "denied: no run")
}

// TestBlocksAndTheCriticalSectionWaitAreChildrenOfTheRun: one span per block attempt (a failed
// one in error, one left open ended with the run), and one for the critical section's wait; the
// section's own start is not a taskling.start of its own.
func TestBlocksAndTheCriticalSectionWaitAreChildrenOfTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	err := b.client.Run(b.ctx, "app", "blocks", func(ctx context.Context, e *taskling.Execution) error {
		cs, err := e.CriticalSection(ctx, 0)
		if err != nil {
			return err
		}
		blocks, err := e.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 30, MaxSize: 10}, nil)
		if err != nil {
			return err
		}
		if err := cs.Release(ctx); err != nil {
			return err
		}
		for i, bl := range blocks {
			if err := bl.Start(ctx); err != nil {
				return err
			}
			switch i {
			case 0:
				err = bl.Complete(ctx, 10)
			case 1:
				err = bl.Fail(ctx, "bad row")
			}
			if err != nil {
				return err
			}
		}
		return nil
	}, nil)
	require.NoError(t, err)
	starts := b.named(tasklingotel.SpanStart)
	require.Len(t, starts, 1, "the critical section's start is not traced as a start")
	run := b.childrenOf(starts[0])
	require.Len(t, run, 1)
	children := b.childrenOf(run[0])
	require.ElementsMatch(t, []string{tasklingotel.SpanSectionWait, tasklingotel.SpanBlock, tasklingotel.SpanBlock, tasklingotel.SpanBlock},
		names(children))
	status := map[int64]codes.Code{}
	for _, c := range children {
		if c.Name == tasklingotel.SpanBlock {
			a := attrs(c)
			require.Equal(t, "numeric", a[tasklingotel.AttrBlockKind].AsString())
			require.Equal(t, int64(1), a[tasklingotel.AttrBlockAttempt].AsInt64())
			status[a[tasklingotel.AttrBlockID].AsInt64()] = c.Status.Code
		}
	}
	require.Len(t, status, 3)
	var errs int
	for _, c := range status {
		if c == codes.Error {
			errs++
		}
	}
	require.Equal(t, 2, errs, "the failed block and the one left open when the run ended")
}

// TestAScheduledRunCarriesItsInstant: a scheduler's run is a taskling.start of kind scheduled
// with the instant it runs.
func TestAScheduledRunCarriesItsInstant(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ran := make(chan time.Time, 1)
	require.NoError(t, b.client.Schedule(b.ctx, "app", "cron", "* * * * * *", func(_ context.Context, e *taskling.Execution) error {
		select {
		case ran <- e.ScheduledFor():
		default:
		}
		return nil
	}, nil))
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- b.client.RunScheduler(ctx) }()
	var instant time.Time
	select {
	case instant = <-ran:
	case <-time.After(20 * time.Second):
		t.Fatal("no scheduled run")
	}
	cancel()
	require.NoError(t, <-done)
	var found bool
	for _, s := range b.named(tasklingotel.SpanStart) {
		a := attrs(s)
		if a[tasklingotel.AttrScheduledFor].AsString() == instant.UTC().Format(time.RFC3339Nano) {
			found = true
			require.Equal(t, "scheduled", a[tasklingotel.AttrStartKind].AsString())
			require.Equal(t, []string{tasklingotel.SpanRun}, names(b.childrenOf(s)))
		}
	}
	require.True(t, found, "no span for the instant %s", instant)
}

// TestSubmitStoresTheCallersTraceContext: Submit stores the W3C trace context of its context's
// span (SubmitOptions.TraceContext, when given, wins), and the submission reads it back.
func TestSubmitStoresTheCallersTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx, span := b.provider.Tracer("test").Start(b.ctx, "submitter")
	defer span.End()
	id, err := b.client.Submit(ctx, "app", "jobs", nil)
	require.NoError(t, err)
	sub, err := b.client.Submission(b.ctx, id)
	require.NoError(t, err)
	sc := span.SpanContext()
	require.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", sub.Trace.Traceparent)

	given := taskling.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: "vendor=x"}
	id, err = b.client.Submit(ctx, "app", "jobs", &taskling.SubmitOptions{TraceContext: given})
	require.NoError(t, err)
	sub, err = b.client.Submission(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, given, sub.Trace)

	id, err = b.client.Submit(b.ctx, "app", "jobs", nil)
	require.NoError(t, err)
	sub, err = b.client.Submission(b.ctx, id)
	require.NoError(t, err)
	require.True(t, sub.Trace.IsZero(), "no span: nothing stored")
}

// TestKeyedAndWeightedStartsCarryTheirKeyAndCost: a start's span has taskling.key when the start
// names a key and taskling.cost when it names a key or a cost above 1; a plain start has neither.
func TestKeyedAndWeightedStartsCarryTheirKeyAndCost(t *testing.T) {
	t.Parallel()
	b := setup(t, &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 8}}, nil)
	for _, opts := range []*taskling.StartOptions{{Key: "acme", Cost: 2}, {Key: "globex"}, {Cost: 3}, nil} {
		e, err := b.client.StartExecution(b.ctx, "app", "keyed", opts)
		require.NoError(t, err)
		require.NoError(t, e.Complete(b.ctx))
	}
	starts := b.named(tasklingotel.SpanStart)
	require.Len(t, starts, 4)
	want := []struct {
		key  string
		cost int64
	}{{"acme", 2}, {"globex", 1}, {"", 3}, {"", 0}}
	for i, s := range starts {
		a := attrs(s)
		key, hasKey := a[tasklingotel.AttrKey]
		cost, hasCost := a[tasklingotel.AttrCost]
		require.Equal(t, want[i].key != "", hasKey, "start %d: taskling.key", i)
		require.Equal(t, want[i].key, key.AsString(), "start %d", i)
		require.Equal(t, want[i].cost != 0, hasCost, "start %d: taskling.cost", i)
		require.Equal(t, want[i].cost, cost.AsInt64(), "start %d", i)
	}
}

// TestKeyLimitAndRateDenialsSayWhy: a start refused by its key's limit, by the task's rate, or
// by its key's rate while it waited (WaitForSlot, given up), is denied (not an error) with the
// reason Hooks.Denied was given: key_limit, rate, key_rate.
func TestKeyLimitAndRateDenialsSayWhy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var hooked []string
	hooks := taskling.Hooks{Denied: func(_, _ string, r taskling.DenyReason) {
		mu.Lock()
		hooked = append(hooked, string(r))
		mu.Unlock()
	}}
	b := setup(t, &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 8, KeyLimit: 1}}, nil)
	b.client.AddHooks(hooks)
	held, err := b.client.StartExecution(b.ctx, "app", "keyed", &taskling.StartOptions{Key: "acme"})
	require.NoError(t, err)
	_, err = b.client.StartExecution(b.ctx, "app", "keyed", &taskling.StartOptions{Key: "acme"})
	require.ErrorIs(t, err, taskling.ErrKeyLimitReached)
	require.NoError(t, held.Complete(b.ctx))

	rated := taskling.TaskSettings{ConcurrencyLimit: 8, Rate: taskling.Rate{Count: 1, Per: time.Hour}}
	c, spans, _, _, _ := newTraced(t, b.pool, &taskling.Config{Defaults: rated}, nil)
	c.AddHooks(hooks)
	first, err := c.StartExecution(b.ctx, "app", "rated", nil)
	require.NoError(t, err)
	require.NoError(t, first.Complete(b.ctx))
	_, err = c.StartExecution(b.ctx, "app", "rated", nil)
	require.ErrorIs(t, err, taskling.ErrRateLimited)

	keyRated := taskling.TaskSettings{ConcurrencyLimit: 8, KeyRate: taskling.Rate{Count: 1, Per: time.Hour}}
	kc, keySpans, _, _, _ := newTraced(t, b.pool, &taskling.Config{Defaults: keyRated}, nil)
	kc.AddHooks(hooks)
	first, err = kc.StartExecution(b.ctx, "app", "key-rated", &taskling.StartOptions{Key: "acme"})
	require.NoError(t, err)
	require.NoError(t, first.Complete(b.ctx))
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second) // a loaded machine's first try may take 300 ms
	defer cancel()
	_, err = kc.StartExecution(ctx, "app", "key-rated", &taskling.StartOptions{Key: "acme", WaitForSlot: true})
	require.ErrorIs(t, err, taskling.ErrRateLimited)

	var traced []string
	for _, s := range append(append(b.named(tasklingotel.SpanStart), spans.GetSpans()...), keySpans.GetSpans()...) {
		if s.Name != tasklingotel.SpanStart {
			continue
		}
		a := attrs(s)
		if a[tasklingotel.AttrOutcome].AsString() == "denied" {
			require.Equal(t, codes.Unset, s.Status.Code, "a denial is not an error")
			traced = append(traced, a[tasklingotel.AttrDenyReason].AsString())
		}
	}
	require.ElementsMatch(t, []string{"key_limit", "rate", "key_rate"}, traced)
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, traced, hooked, "the trace says what the hooks were told")
}

package taskling_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// timings records what the timing hooks report.
type timings struct {
	mu                sync.Mutex
	waited, subWaited []time.Duration
	ended             []taskling.Outcome
	endedTook         []time.Duration
}

func (tm *timings) hooks() taskling.Hooks {
	return taskling.Hooks{
		Waited: func(_, _ string, d time.Duration) { tm.mu.Lock(); tm.waited = append(tm.waited, d); tm.mu.Unlock() },
		SubmissionWaited: func(_, _ string, d time.Duration) {
			tm.mu.Lock()
			tm.subWaited = append(tm.subWaited, d)
			tm.mu.Unlock()
		},
		Ended: func(_, _ string, o taskling.Outcome, d time.Duration) {
			tm.mu.Lock()
			tm.ended, tm.endedTook = append(tm.ended, o), append(tm.endedTook, d)
			tm.mu.Unlock()
		},
	}
}

func (tm *timings) snapshot() timings {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return timings{waited: append([]time.Duration(nil), tm.waited...), subWaited: append([]time.Duration(nil), tm.subWaited...),
		ended: append([]taskling.Outcome(nil), tm.ended...), endedTook: append([]time.Duration(nil), tm.endedTook...)}
}

// TestTimingHooksMeasureWaitsAndRuns: Waited gives a WaitForSlot start's time in the queue on the
// database clock (0 when granted at once; a start without WaitForSlot reports none),
// SubmissionWaited the time from Submit to the attempt's start, and Ended each execution's run
// time and outcome, once, however often Complete is called.
func TestTimingHooksMeasureWaitsAndRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	tm := &timings{}
	b.client.AddHooks(tm.hooks())

	held := b.start(t, nil) // no WaitForSlot: no wait reported
	got := make(chan *taskling.Execution, 1)
	go func() {
		e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
		if err == nil {
			got <- e
		}
	}()
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM taskling.task_definition WHERE queue <> ''`) == 1 },
		10*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, held.Complete(b.ctx))
	require.NoError(t, held.Complete(b.ctx), "a second Complete reports nothing more")
	waiter := <-got
	require.NoError(t, waiter.RecordError(b.ctx, "half done", true))
	require.NoError(t, waiter.Complete(b.ctx))
	immediate, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err)
	require.NoError(t, immediate.Complete(b.ctx))

	s := tm.snapshot()
	require.Len(t, s.waited, 2)
	require.GreaterOrEqual(t, s.waited[0], 250*time.Millisecond, "queued for the 300 ms the holder kept its slot")
	require.Less(t, s.waited[0], 10*time.Second)
	require.Zero(t, s.waited[1], "granted without queueing")
	require.Equal(t, []taskling.Outcome{taskling.OutcomeCompleted, taskling.OutcomeFailed, taskling.OutcomeCompleted}, s.ended)
	require.GreaterOrEqual(t, s.endedTook[0], 250*time.Millisecond)

	id, err := b.client.Submit(b.ctx, b.app, "jobs", nil)
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	ctx, stop := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.client.Work(ctx, b.app, "jobs", func(context.Context, *taskling.Execution) error { return errors.New("again") },
			&taskling.WorkOptions{})
	}()
	require.Eventually(t, func() bool {
		sub, err := b.client.Submission(b.ctx, id)
		return err == nil && sub.Status == taskling.SubmissionDead
	}, 20*time.Second, 10*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	s = tm.snapshot()
	require.Len(t, s.subWaited, taskling.DefaultMaxAttempts, "one per attempt")
	require.GreaterOrEqual(t, s.subWaited[0], 150*time.Millisecond, "from Submit, on the database clock")
	require.Equal(t, taskling.OutcomeFailed, s.ended[len(s.ended)-1])
}

// TestALaterTraceparentVersionHoldsPrintableASCIIOnly is issue 40 item 7: what a later version
// adds after the 55 characters of version 00 was stored as it came, so a \xff there failed the
// submission with SQLSTATE 22021 (and the HTTP API's submit with a 500) instead of being refused.
func TestALaterTraceparentVersionHoldsPrintableASCIIOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const head = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tp := range []string{head + "-\xff", head + "-\x00", head + "-a b", head + "-\u00e9"} {
		_, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{TraceContext: taskling.TraceContext{Traceparent: tp}})
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%q", tp)
		require.ErrorContains(t, err, "SubmitOptions.TraceContext.Traceparent")
	}
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{TraceContext: taskling.TraceContext{Traceparent: head + "-later"}})
	require.NoError(t, err)
	s, err := b.client.Submission(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, head+"-later", s.Trace.Traceparent)
}

// TestValidateTraceContextRefusesMalformedValues: the W3C format, named in the error.
func TestValidateTraceContextRefusesMalformedValues(t *testing.T) {
	t.Parallel()
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	require.NoError(t, taskling.ValidateTraceContext("tc", taskling.TraceContext{}))
	require.NoError(t, taskling.ValidateTraceContext("tc", taskling.TraceContext{Traceparent: good, Tracestate: "a=1,b=2"}))
	require.NoError(t, taskling.ValidateTraceContext("tc", taskling.TraceContext{Traceparent: "01" + good[2:] + "-future"}))
	for _, bad := range []taskling.TraceContext{
		{Tracestate: "a=1"},
		{Traceparent: good[:54]},
		{Traceparent: good + "-x"},
		{Traceparent: "ff" + good[2:]},
		{Traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},
		{Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
		{Traceparent: "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Traceparent: good, Tracestate: "a=\n"},
		{Traceparent: good, Tracestate: string(make([]byte, 513))},
	} {
		err := taskling.ValidateTraceContext("SubmitOptions.TraceContext", bad)
		require.ErrorIs(t, err, taskling.ErrInvalidArgument, "%+v", bad)
		require.Contains(t, err.Error(), "SubmitOptions.TraceContext", "%+v", bad)
	}
}

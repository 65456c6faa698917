package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// sectionWorker is one goroutine of -section: it loops over executions of its task
// (WaitForSlot), each of which waits for the task's critical section (with a timeout), holds it
// for a random short time in steps — each after checking the section's context — and releases
// it. Every wait, acquisition, give-up, stop and release is recorded in the ledger before the
// worker acts on it, under the execution's id (the section's own execution is not visible to
// it); the execution itself is recorded like a holder's (grant, stop, complete).
type sectionWorker struct {
	*worker
	opts options
	// timeout of every wait; -1: a tiny one, drawn for each wait up to opts.tinyTimeout.
	timeout time.Duration
}

func (sw *sectionWorker) loop(stop context.Context) {
	for stop.Err() == nil {
		sctx, cancel := context.WithTimeout(stop, 3*time.Second)
		e, err := sw.client.StartExecution(sctx, sw.app, sw.task, &taskling.StartOptions{WaitForSlot: true})
		returned := time.Now()
		cancel()
		if err != nil {
			sleep(stop, 20*time.Millisecond+time.Duration(sw.rnd.Int64N(int64(30*time.Millisecond))))
			continue
		}
		timeout := sw.timeout
		if timeout < 0 {
			timeout = time.Millisecond + time.Duration(sw.rnd.Int64N(int64(sw.opts.tinyTimeout)))
		}
		sw.round(stop, e, returned, timeout, false)
		sw.complete(e)
	}
}

// holdUntilStopped takes the section (no timeout), prints "holding <execution>" on stdout and
// holds it until the process stops (or, rather, is killed: that is what the harness does on
// reading the line).
func (sw *sectionWorker) holdUntilStopped(stop context.Context) {
	for stop.Err() == nil {
		e, err := sw.client.StartExecution(stop, sw.app, sw.task, &taskling.StartOptions{WaitForSlot: true})
		if err != nil {
			sleep(stop, 50*time.Millisecond)
			continue
		}
		sw.round(stop, e, time.Now(), 0, true)
		sw.complete(e)
		return
	}
}

func (sw *sectionWorker) complete(e *taskling.Execution) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = e.Complete(cctx)
		cancel()
		if err == nil || errors.Is(err, taskling.ErrLeaseLost) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sw.completed(e.ID(), err)
}

// round records the grant of e, waits for the section, holds it and releases it, and records
// the stop of e (Complete comes next).
func (sw *sectionWorker) round(stop context.Context, e *taskling.Execution, returned time.Time, timeout time.Duration, forever bool) {
	w, host := sw.w, sw.client.HostName()
	must(w.Write(ledger.Event{Kind: ledger.KindGrant, Host: host, At: w.DBTime(returned), Exec: e.ID(), Task: sw.task,
		Fence: e.FencingToken(), GrantedAt: e.StartedAt(), Waited: true}))
	ctx := e.Context()
	var lastOK time.Time // the last instant the execution's context was seen not cancelled
	if ctx.Err() == nil {
		lastOK = time.Now()
		must(w.Write(ledger.Event{Kind: ledger.KindSectionWait, Host: host, At: w.DBTime(lastOK), Exec: e.ID(), Task: sw.task, Timeout: timeout}))
		s, err := e.CriticalSection(stop, timeout)
		at := w.Now()
		if err != nil {
			ev := ledger.Event{Kind: ledger.KindSectionGiveUp, Host: host, At: at, Exec: e.ID(), Task: sw.task, Timeout: timeout,
				Result: ledger.ResultError, Error: err.Error()}
			switch {
			case errors.Is(err, context.DeadlineExceeded) && stop.Err() == nil:
				ev.Result = ledger.SectionTimeout
				if !errors.Is(err, taskling.ErrLimitReached) {
					// The timeout passed before the wait queued (creating the section's task,
					// say): CriticalSection's doc says the error wraps ErrLimitReached too.
					ev.Note = ledger.NoteNotLimitReached
				}
			case stop.Err() != nil:
				ev.Result = ledger.SectionStopped
			}
			must(w.Write(ev))
		} else {
			must(w.Write(ledger.Event{Kind: ledger.KindSectionAcquire, Host: host, At: at, Exec: e.ID(), Task: sw.task}))
			if forever {
				fmt.Printf("holding %d\n", e.ID())
			}
			sw.hold(stop, s, e.ID(), forever)
		}
		if ctx.Err() == nil {
			lastOK = time.Now()
		}
	}
	stopEv := ledger.Event{Kind: ledger.KindStop, Host: host, Exec: e.ID(), Task: sw.task, Reason: ledger.ReasonCompleted}
	if ctx.Err() == nil {
		stopEv.At = w.Now() // Complete is called after this instant
	} else {
		stopEv.Reason, stopEv.Observed = ledger.ReasonCancelled, w.Now()
		if !lastOK.IsZero() {
			stopEv.At = w.DBTime(lastOK)
		}
		if c := context.Cause(ctx); c != nil {
			stopEv.Cause = c.Error()
			if errors.Is(c, taskling.ErrLeaseLost) {
				stopEv.Reason = ledger.ReasonLeaseLost
			}
		}
	}
	must(w.Write(stopEv))
}

// hold holds s in steps while its context is not cancelled: for a random short time, or until
// the process stops; then records the stop, releases s and records the result.
func (sw *sectionWorker) hold(stop context.Context, s *taskling.CriticalSection, owner int64, forever bool) {
	w, host := sw.w, sw.client.HostName()
	ctx := s.Context()
	until := time.Now().Add(sw.holdFor())
	var lastOK time.Time
	lost := false
	for {
		if ctx.Err() != nil {
			lost = true
			break
		}
		lastOK = time.Now()
		if (forever && stop.Err() != nil) || (!forever && !lastOK.Before(until)) {
			break
		}
		d := sw.step
		if !forever {
			d = min(d, until.Sub(lastOK))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	ev := ledger.Event{Kind: ledger.KindSectionStop, Host: host, Exec: owner, Task: sw.task, Reason: ledger.ReasonCompleted}
	if !lastOK.IsZero() {
		ev.At = w.DBTime(lastOK)
	}
	if lost {
		ev.Reason, ev.Observed = ledger.ReasonCancelled, w.Now()
		if c := context.Cause(ctx); c != nil {
			ev.Cause = c.Error()
			if errors.Is(c, taskling.ErrLeaseLost) {
				ev.Reason = ledger.ReasonLeaseLost
			}
		}
	} else {
		ev.At = w.Now() // Release is called after this instant
	}
	must(w.Write(ev))
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := s.Release(cctx)
	cancel()
	res := ledger.Event{Kind: ledger.KindSectionRelease, Host: host, Exec: owner, Task: sw.task, Result: ledger.ResultOK}
	switch {
	case err == nil:
	case errors.Is(err, taskling.ErrLeaseLost):
		res.Result, res.Error = ledger.ResultLeaseLost, err.Error()
	default:
		res.Result, res.Error = ledger.ResultError, err.Error()
	}
	res.At = w.Now()
	must(w.Write(res))
}

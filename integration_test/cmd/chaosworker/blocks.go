package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// blockWorker is one goroutine of -blocks: it loops over executions of its task (WaitForSlot),
// each of which asks once for numeric blocks of the range — continuing from the last block,
// taking dead and failed blocks again first — and works through them one after the other: Start,
// a few milliseconds of work in steps (each after checking the execution's context), then Fail
// (the first attempt of the blocks FailsOnPurpose picks) or Complete. Every take, start, stop
// and end is recorded in the ledger before the worker acts on it, and the execution itself like
// a holder's (grant, stop, complete), so that the ordinary checks apply to it as well.
type blockWorker struct {
	*worker
	opts options
}

// FailsOnPurpose says whether the first attempt of the block starting at from fails on purpose:
// for pct percent of the blocks, by a hash of from (the harness knows which without asking).
func FailsOnPurpose(from int64, pct int) bool {
	x := uint64(from) + 0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return x%100 < uint64(pct)
}

func (bw *blockWorker) loop(stop context.Context) {
	for stop.Err() == nil {
		sctx, cancel := context.WithTimeout(stop, 3*time.Second)
		e, err := bw.client.StartExecution(sctx, bw.app, bw.task, &taskling.StartOptions{WaitForSlot: true})
		returned := time.Now()
		cancel()
		if err != nil {
			sleep(stop, 20*time.Millisecond+time.Duration(bw.rnd.Int64N(int64(30*time.Millisecond))))
			continue
		}
		n := bw.execute(e, returned)
		var cerr error
		for attempt := 0; attempt < 5; attempt++ {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cerr = e.Complete(cctx)
			cancel()
			if cerr == nil || errors.Is(cerr, taskling.ErrLeaseLost) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		bw.completed(e.ID(), cerr)
		if n == 0 {
			// Nothing to take: the blocks left are live elsewhere, or dead ones not yet judged
			// dead. Look again a little later.
			sleep(stop, 50*time.Millisecond+time.Duration(bw.rnd.Int64N(int64(50*time.Millisecond))))
		}
	}
}

// execute records the grant, takes blocks and works through them, and records the stop; it
// returns how many blocks it took.
func (bw *blockWorker) execute(e *taskling.Execution, returned time.Time) int {
	w, host := bw.w, bw.client.HostName()
	must(w.Write(ledger.Event{Kind: ledger.KindGrant, Host: host, At: w.DBTime(returned), Exec: e.ID(), Task: bw.task,
		Fence: e.FencingToken(), GrantedAt: e.StartedAt(), Waited: true}))
	ctx := e.Context()
	var lastOK time.Time // the last instant the execution's context was seen not cancelled
	ok := func() bool {
		if ctx.Err() != nil {
			return false
		}
		lastOK = time.Now()
		return true
	}
	var blocks []*taskling.Block
	if ok() {
		retry := &taskling.RetryPolicy{Within: time.Hour, RetryLimit: bw.opts.retryLimit}
		var err error
		blocks, err = e.NumericBlocks(ctx, taskling.NumericRange{From: bw.opts.from, To: bw.opts.to, MaxSize: bw.opts.size},
			&taskling.BlockOptions{MaxBlocks: bw.opts.maxBlocks, ContinueFromLast: true, ReprocessDead: retry, ReprocessFailed: retry})
		taken := w.DBTime(time.Now())
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "chaosworker %s: execution %d: NumericBlocks: %v\n", host, e.ID(), err)
		}
		for _, b := range blocks {
			must(w.Write(ledger.Event{Kind: ledger.KindBlockTake, Host: host, At: taken, Exec: e.ID(), Task: bw.task,
				Block: b.ID, Attempt: b.Attempt, BlockFrom: b.From, BlockTo: b.To}))
		}
	}
	for _, b := range blocks {
		ev := func(kind ledger.Kind) ledger.Event {
			return ledger.Event{Kind: kind, Host: host, Exec: e.ID(), Task: bw.task, Block: b.ID, Attempt: b.Attempt}
		}
		stopped := func(reason, note string, err error) {
			s := ev(ledger.KindBlockStop)
			s.Reason, s.Note = reason, note
			if err != nil {
				s.Error = err.Error()
			}
			if reason == ledger.ReasonCancelled {
				if c := context.Cause(ctx); c != nil {
					s.Cause = c.Error()
				}
			}
			if !lastOK.IsZero() {
				s.At = w.DBTime(lastOK)
			}
			must(w.Write(s))
		}
		if !ok() {
			stopped(ledger.ReasonCancelled, "", nil)
			continue
		}
		if err := b.Start(ctx); err != nil {
			stopped(ledger.ReasonError, "", err)
			continue
		}
		st := ev(ledger.KindBlockStart)
		st.At = w.Now()
		must(w.Write(st))
		until := time.Now().Add(bw.holdFor())
		worked := true
		for {
			if !ok() {
				worked = false
				break
			}
			if !lastOK.Before(until) {
				break
			}
			time.Sleep(min(bw.step, until.Sub(lastOK)))
		}
		if !worked {
			stopped(ledger.ReasonCancelled, "", nil)
			continue
		}
		fail := b.Attempt == 1 && FailsOnPurpose(b.From, bw.opts.failPct)
		call := map[bool]string{true: "fail", false: "complete"}[fail]
		stopped(ledger.ReasonCompleted, call, nil)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		if fail {
			err = b.Fail(cctx, "chaos: first attempt failed on purpose")
		} else {
			err = b.Complete(cctx, b.To-b.From+1)
		}
		cancel()
		end := ev(ledger.KindBlockEnd)
		switch {
		case err == nil && fail:
			end.Result = ledger.BlockFailed
		case err == nil:
			end.Result = ledger.BlockCompleted
		case errors.Is(err, taskling.ErrBlockLost):
			end.Result, end.Error = ledger.BlockLost, err.Error()
		default:
			end.Result, end.Error = ledger.ResultError, err.Error()
		}
		end.At = w.Now()
		must(w.Write(end))
	}
	stopEv := ledger.Event{Kind: ledger.KindStop, Host: host, Exec: e.ID(), Task: bw.task, Reason: ledger.ReasonCompleted}
	if ok() {
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
	return len(blocks)
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/bench"
)

// heartbeatResult is the heartbeat scenario's measurement: holders executions in procs processes
// over tasks tasks of 100 slots, interval 1 s, threshold 2 s, default margin, for window.
type heartbeatResult struct {
	procs, holders, tasks int
	window                time.Duration
	commitsPerSecond      float64 // the database's, during the window: heartbeats only
	walPerSecond          float64 // bytes
	machineBusy           float64 // fraction of all CPUs busy during the window
	clientCPU             time.Duration
	leaseLosses           int64
}

const heartbeatSlots = 100

func (e *environment) heartbeats(ctx context.Context, o options) (*heartbeatResult, error) {
	pool, done, err := e.fresh(ctx, 4, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	r := &heartbeatResult{procs: o.heartbeatProcs, holders: o.holders, tasks: o.holders / heartbeatSlots, window: o.heartbeatDuration}
	fmt.Printf("heartbeats: %d holders in %d processes over %d tasks of %d slots, for %s\n",
		r.holders, r.procs, r.tasks, heartbeatSlots, r.window)
	// The children start their holders first; the window opens once all of them can be held.
	startAt := time.Now().Add(60 * time.Second)
	type measured struct {
		commits, wal int64
		cpu          bench.CPUTimes
	}
	sample := func() (measured, error) {
		var m measured
		var err error
		if m.commits, err = bench.DBCommits(ctx, pool); err != nil {
			return m, err
		}
		if m.wal, err = bench.WALPosition(ctx, pool); err != nil {
			return m, err
		}
		m.cpu = bench.ReadCPU()
		return m, nil
	}
	var before, after measured
	var sampleErr error
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		time.Sleep(time.Until(startAt.Add(time.Second))) // past the first heartbeats' statistics flush
		before, sampleErr = sample()
		time.Sleep(r.window - 2*time.Second)
		if sampleErr == nil {
			after, sampleErr = sample()
		}
	}()
	results, err := children(ctx, r.procs, pool.Config().ConnString(), "-child", "holders",
		"-limit", fmt.Sprint(heartbeatSlots), "-tasks", fmt.Sprint(r.tasks), "-child-holders", fmt.Sprint(r.holders/r.procs),
		"-start-at", fmt.Sprint(startAt.UnixNano()), "-child-duration", r.window.String())
	<-sampled
	if err != nil {
		return nil, err
	}
	if sampleErr != nil {
		return nil, sampleErr
	}
	seconds := (r.window - 2*time.Second).Seconds()
	r.commitsPerSecond = float64(after.commits-before.commits) / seconds
	r.walPerSecond = float64(after.wal-before.wal) / seconds
	r.machineBusy = after.cpu.BusySince(before.cpu)
	for _, c := range results {
		r.leaseLosses += c.LeaseLosses
		r.clientCPU += c.CPU
	}
	return r, nil
}

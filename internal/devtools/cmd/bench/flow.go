package main

import (
	"context"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/taskling"
)

// flowOptions size the flow scenarios (one run each, after the interleaved ones).
type flowOptions struct {
	window      time.Duration // utilization window
	submissions int           // drained in the drain scenario
	handovers   int           // grants per process in the handover ping-pong
}

// flowResult is what the flow scenarios measured.
type flowResult struct {
	limit, procs, workers int
	job, window           time.Duration
	busy                  time.Duration
	runs                  int64
	handovers             []time.Duration
	uncontended           bench.Result
	drained               int
	submittedRate         float64
	directRate            float64
	endToEnd              []time.Duration
}

const (
	flowLimit   = 40
	flowProcs   = 4
	flowWorkers = 20
	flowJob     = 200 * time.Millisecond
)

func (e *environment) flow(ctx context.Context, o flowOptions) (*flowResult, error) {
	r := &flowResult{limit: flowLimit, procs: flowProcs, workers: flowWorkers, job: flowJob, window: o.window, drained: o.submissions}
	fmt.Printf("flow: utilization (limit %d, %d processes × %d workers, %s jobs, %s)…\n", flowLimit, flowProcs, flowWorkers, flowJob, o.window)
	pool, done, err := e.fresh(ctx, 0, nil)
	if err != nil {
		return nil, err
	}
	startAt := time.Now().Add(3 * time.Second)
	results, err := children(ctx, flowProcs, pool.Config().ConnString(), "-child", "busy",
		"-goroutines", fmt.Sprint(flowWorkers), "-limit", fmt.Sprint(flowLimit), "-isolation", "read committed",
		"-start-at", fmt.Sprint(startAt.UnixNano()), "-child-duration", o.window.String())
	done()
	if err != nil {
		return nil, err
	}
	for _, c := range results {
		r.busy += c.Busy
		r.runs += c.Cycles
	}

	fmt.Printf("flow: handover (limit 1, 2 processes × %d grants)…\n", o.handovers)
	pool, done, err = e.fresh(ctx, 0, nil)
	if err != nil {
		return nil, err
	}
	results, err = children(ctx, 2, pool.Config().ConnString(), "-child", "pingpong",
		"-limit", "1", "-isolation", "read committed", "-child-holders", fmt.Sprint(o.handovers),
		"-start-at", fmt.Sprint(time.Now().Add(2*time.Second).UnixNano()))
	if err == nil {
		logs := make([][]bench.Handoff, len(results))
		for i, c := range results {
			logs[i] = c.Handoffs
		}
		r.handovers = bench.HandoverLatencies(logs)
		// The same run's uncontended cycle, for the ratio.
		var client *taskling.Client
		if client, err = taskling.NewClient(pool, &taskling.Config{HostName: "bench-flow", Defaults: taskling.TaskSettings{ConcurrencyLimit: 1}}); err == nil {
			r.uncontended, err = bench.Taskling(ctx, client, "bench", 1, 1, 3*time.Second)
			client.Close()
		}
	}
	done()
	if err != nil {
		return nil, err
	}

	fmt.Printf("flow: %d submissions drained by %d workers vs direct starts at limit %d…\n", o.submissions, flowLimit, flowLimit)
	pool, done, err = e.fresh(ctx, 0, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench-flow", Defaults: taskling.TaskSettings{ConcurrencyLimit: flowLimit}})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	if r.submittedRate, r.directRate, err = bench.Drain(ctx, client, pool, "bench", flowLimit, o.submissions); err != nil {
		return nil, err
	}
	if r.endToEnd, err = bench.EndToEnd(ctx, client, "bench", 4, 200, 5*time.Millisecond); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *flowResult) print() {
	fmt.Println("Waiting and submissions (one run):")
	util := float64(r.busy) / float64(time.Duration(r.limit)*r.window)
	fmt.Printf("  slot utilization, limit %d, %d processes × %d workers, %s jobs: %.1f %% of %d × %s (%d runs; target ≥ 95 %%)\n",
		r.limit, r.procs, r.workers, r.job, 100*util, r.limit, r.window, r.runs)
	h := bench.Result{Latencies: r.handovers}
	fmt.Printf("  handover, Complete in one process → StartExecution returns in another: p50 %s, p99 %s (n=%d; target p99 < 25ms and ≤ 2× the uncontended cycle's p99 %s: %.2f×)\n",
		ms(h.Percentile(50)), ms(h.Percentile(99)), len(r.handovers), ms(r.uncontended.Percentile(99)),
		float64(h.Percentile(99))/float64(max(1, r.uncontended.Percentile(99))))
	fmt.Printf("  %d submissions drained: %.0f runs/s vs %.0f direct StartExecution+Complete cycles/s at the same concurrency: %.2f× (target ≥ 0.7×, issue 25)\n",
		r.drained, r.submittedRate, r.directRate, r.submittedRate/r.directRate)
	e := bench.Result{Latencies: r.endToEnd}
	fmt.Printf("  submit → completed visible (idle workers, polled every 1ms): p50 %s, p99 %s (n=%d)\n",
		ms(e.Percentile(50)), ms(e.Percentile(99)), len(r.endToEnd))
}

package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/taskling-go/taskling/taskling"
)

// The rate scenarios (issue 27, docs/rates.md) measure a task under a rate with more demand than
// it admits: whether the grants keep to the rate and use all of it, and what the rate adds to a
// granted start's latency.

// RateSettings are the settings of the rate scenarios' task: limit, under rate (the zero Rate:
// none).
func RateSettings(limit int, rate taskling.Rate) taskling.TaskSettings {
	return taskling.TaskSettings{ConcurrencyLimit: limit, Rate: rate}
}

// RatedWaits runs StartExecution(WaitForSlot) + Complete cycles of goroutines on task "rated" of
// app, whose rate (declared by client: RateSettings) admits fewer starts than they make, so that
// each start waits for the rate's room. Afterwards it reads the database's grant times: MaxWindow
// is the most units granted in a window of rate.Per, and every grant that took a window over
// Count + Burst − 1 is a violation.
func RatedWaits(ctx context.Context, client *taskling.Client, app string, goroutines int, rate taskling.Rate, d time.Duration) (Result, error) {
	res, err := waitingCycles(ctx, client, app, "rated", goroutines, d)
	if err != nil {
		return res, err
	}
	res.MaxWindow, res.Violations, err = rateWindows(ctx, client, app, "rated", rate)
	return res, err
}

// RatedStarts runs StartExecution (no waiting) + Complete cycles of goroutines on task "rated" of
// app, under rate (declared by client; the zero Rate: the same scenario without one). A start the
// rate refuses sleeps its RetryAfter plus a random part of it (jitter) and counts in Failed; the result's cycles and latencies are
// the granted starts alone (the latency: StartExecution's call). With a rate, MaxWindow and
// Violations are as RatedWaits'.
func RatedStarts(ctx context.Context, client *taskling.Client, app string, goroutines int, rate taskling.Rate, d time.Duration) (Result, error) {
	retriesBefore := client.Stats().Retries
	var refused atomic.Int64
	var acquires acquireTimes
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, _ int) error {
		return acquires.cycle(ctx, func() (*taskling.Execution, error) {
			return client.StartExecution(ctx, app, "rated", nil)
		}, func(err error) bool {
			var rl *taskling.RateLimitedError
			if !errors.As(err, &rl) {
				return false
			}
			refused.Add(1)
			// As a client should: at RetryAfter and a random part of it more, so that the
			// refused do not all come back at once.
			sleepCtx(ctx, rl.RetryAfter+rand.N(rl.RetryAfter+time.Microsecond))
			return true
		})
	})
	res.Latencies, res.Cycles = acquires.d, int64(len(acquires.d))
	if err != nil {
		return res, err
	}
	res.Retries = client.Stats().Retries - retriesBefore
	res.Failed = refused.Load()
	if !rate.IsZero() {
		res.MaxWindow, res.Violations, err = rateWindows(ctx, client, app, "rated", rate)
	}
	return res, err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// rateWindows reads the grant times (started_at) and costs of app/task's executions and judges
// them with windowsOver.
func rateWindows(ctx context.Context, client *taskling.Client, app, task string, rate taskling.Rate) (maxUnits, over int64, err error) {
	var gs []grant
	if err := eachGrant(ctx, client, app, task, func(e taskling.ExecutionInfo) {
		gs = append(gs, grant{e.StartedAt, int64(max(1, e.Cost))})
	}); err != nil {
		return 0, 0, err
	}
	maxUnits, over = windowsOver(gs, rate)
	return maxUnits, over, nil
}

// grant is a grant's time and cost, as the rate check reads it.
type grant struct {
	at   time.Time
	cost int64
}

// windowsOver returns the most units granted in a half-open window of rate.Per, and the grants
// that took a window over Count + Burst − 1: for each grant, the units of the window that ends
// with it (those granted less than Per before it, and it).
func windowsOver(gs []grant, rate taskling.Rate) (maxUnits, over int64) {
	gs = slices.Clone(gs)
	slices.SortFunc(gs, func(a, b grant) int { return a.at.Compare(b.at) })
	bound := int64(rate.Count + max(rate.Burst, 1) - 1)
	units, i := int64(0), 0
	for _, g := range gs {
		units += g.cost
		for !gs[i].at.After(g.at.Add(-rate.Per)) {
			units -= gs[i].cost
			i++
		}
		maxUnits = max(maxUnits, units)
		if units > bound {
			over++
		}
	}
	return maxUnits, over
}

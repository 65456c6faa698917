package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/taskling"
)

// The rate scenarios (issue 27): `-only rate:` runs them alone. The task's limit (40) never binds
// 16 goroutines; its rate, 500/1s with a burst of 10 (at most 509 units in any 1 s window), binds
// them all: unrated, they make several times as many cycles.
const (
	rateWaits  = "rate: 500/1s burst 10, 16 goroutines waiting"
	rateStarts = "rate: 500/1s burst 10, 16 goroutines starting"
	rateNone   = "rate: none, 16 goroutines starting"
)

const (
	rateLimit, rateGoroutines = 40, 16
)

var benchRate = taskling.Rate{Count: 500, Per: time.Second, Burst: 10}

// rateScenarios are the rate scenarios at both isolation levels: waiting starts for e.rateD (the
// rate's throughput and its windows), and non-waiting starts with and without the rate for e.d
// (the latency of a granted start).
func rateScenarios() []scenario {
	var out []scenario
	add := func(kind string, rate taskling.Rate, run func(ctx context.Context, e *environment, client *taskling.Client) (bench.Result, error)) {
		for _, iso := range isolations {
			out = append(out, scenario{name: "taskling " + kind + " (" + isoName(iso) + ")", kind: kind, iso: iso,
				run: func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error) {
					client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso, Defaults: bench.RateSettings(rateLimit, rate)})
					if err != nil {
						return bench.Result{}, err
					}
					defer client.Close()
					return run(ctx, e, client)
				}})
		}
	}
	add(rateWaits, benchRate, func(ctx context.Context, e *environment, client *taskling.Client) (bench.Result, error) {
		return bench.RatedWaits(ctx, client, "bench", rateGoroutines, benchRate, e.rateD)
	})
	for _, rate := range []taskling.Rate{benchRate, {}} {
		kind := map[bool]string{true: rateNone, false: rateStarts}[rate.IsZero()]
		add(kind, rate, func(ctx context.Context, e *environment, client *taskling.Client) (bench.Result, error) {
			return bench.RatedStarts(ctx, client, "bench", rateGoroutines, rate, e.d)
		})
	}
	return out
}

// printRateTargets checks issue 27's bench targets, when its scenarios ran.
func printRateTargets(t table, rateD time.Duration) {
	if t.get(rateWaits, taskling.IsolationSerializable).runs == 0 && t.get(rateStarts, taskling.IsolationSerializable).runs == 0 {
		return
	}
	bound := benchRate.Count + benchRate.Burst - 1
	fmt.Printf("\nRates (issue 27; rate %s, at most %d units in a window of %s; medians, acquire p99 pooled over the runs):\n", benchRate, bound, benchRate.Per)
	for _, iso := range isolations {
		n := isoName(iso)
		if w := t.get(rateWaits, iso); w.runs > 0 {
			check(w.pooled.MaxWindow <= int64(bound), "%s: 16 goroutines waiting for %s: at most %d units in a 1 s window of the database's grant times (%d grants over); must be ≤ %d",
				n, rateD, w.pooled.MaxWindow, w.pooled.Violations, bound)
			want := 0.95 * float64(benchRate.Count)
			check(w.median >= want, "%s: 16 goroutines waiting for %s: %.0f grants/s = %.3f× the rate; target ≥ 0.95× (%.0f); waits not granted in 10 s: %d",
				n, rateD, w.median, w.median/float64(benchRate.Count), want, w.pooled.Failed)
		}
		rated, plain := t.get(rateStarts, iso), t.get(rateNone, iso)
		if rated.runs == 0 || plain.runs == 0 {
			continue
		}
		rp, pp := rated.pooled.Percentile(99), plain.pooled.Percentile(99)
		check(float64(rp) <= 1.5*float64(pp), "%s: 16 goroutines starting: granted acquire p99 %s under the rate (%.0f grants/s, %d refused) = %.2f× without (%s, %.0f grants/s); target ≤ 1.5×",
			n, ms(rp), rated.median, rated.pooled.Failed, float64(rp)/float64(pp), ms(pp), plain.median)
		check(rated.pooled.MaxWindow <= int64(bound), "%s: 16 goroutines starting under the rate: at most %d units in a 1 s window; must be ≤ %d", n, rated.pooled.MaxWindow, bound)
	}
}

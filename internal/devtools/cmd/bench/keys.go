package main

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/taskling"
)

// The key scenarios (issue 26): `-only keys:` runs them alone.
const (
	keyedNone  = "keys: limit 40, 16 goroutines, no key"
	keyed1000  = "keys: limit 40, 16 goroutines, 1 000 keys of limit 2"
	active100  = "keys: holders over 100 keys, 16 goroutines starting"
	activeMany = "keys: holders over a key each, 16 goroutines starting"
)

const (
	keyedLimit, keyedKeyLimit, keyedKeys = 40, 2, 1000
	keyGoroutines                        = 16
)

// keyScenarios are the key scenarios at both isolation levels. The active-keys ones hold
// e.keyHolders executions over 100 keys, or over keyHolders + 16 keys, while 16 goroutines start
// under keys of their own among them: with -key-holders 9984, 10 000 keys are active at once.
func keyScenarios() []scenario {
	var out []scenario
	add := func(kind string, run func(ctx context.Context, e *environment, pool *pgxpool.Pool, iso taskling.Isolation) (bench.Result, error)) {
		for _, iso := range isolations {
			out = append(out, scenario{name: "taskling " + kind + " (" + isoName(iso) + ")", kind: kind, iso: iso,
				run: func(ctx context.Context, e *environment, pool *pgxpool.Pool) (bench.Result, error) {
					return run(ctx, e, pool, iso)
				}})
		}
	}
	cycles := func(keys, keyLimit int) func(context.Context, *environment, *pgxpool.Pool, taskling.Isolation) (bench.Result, error) {
		return func(ctx context.Context, e *environment, pool *pgxpool.Pool, iso taskling.Isolation) (bench.Result, error) {
			client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso, Defaults: bench.KeyedSettings(keyedLimit, keyLimit)})
			if err != nil {
				return bench.Result{}, err
			}
			defer client.Close()
			return bench.KeyedCycles(ctx, client, "bench", keyGoroutines, keys, keyedLimit, keyLimit, e.d)
		}
	}
	active := func(keys int) func(context.Context, *environment, *pgxpool.Pool, taskling.Isolation) (bench.Result, error) {
		return func(ctx context.Context, e *environment, pool *pgxpool.Pool, iso taskling.Isolation) (bench.Result, error) {
			client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench", Isolation: iso,
				Defaults: bench.ActiveKeysSettings(keyGoroutines, e.keyHolders, cmp.Or(keys, e.keyHolders+keyGoroutines))})
			if err != nil {
				return bench.Result{}, err
			}
			defer client.Close()
			if keys == 0 {
				keys = e.keyHolders + keyGoroutines
			}
			return bench.ActiveKeys(ctx, client, "bench", keyGoroutines, e.keyHolders, keys, e.d)
		}
	}
	add(keyedNone, cycles(0, 0))
	add(keyed1000, cycles(keyedKeys, keyedKeyLimit))
	add(active100, active(100))
	add(activeMany, active(0))
	return out
}

// printKeyTargets checks issue 26's bench targets, when its scenarios ran.
func printKeyTargets(t table, holders int) {
	if t.get(keyed1000, taskling.IsolationSerializable).runs == 0 && t.get(activeMany, taskling.IsolationSerializable).runs == 0 {
		return
	}
	fmt.Println("\nKeys (issue 26; medians, acquire p99 pooled over the runs):")
	for _, iso := range isolations {
		n := isoName(iso)
		if keyed, plain := t.get(keyed1000, iso), t.get(keyedNone, iso); keyed.runs > 0 && plain.median > 0 {
			check(keyed.median >= 0.8*plain.median, "%s: limit 40, 1 000 keys of limit 2, 16 goroutines: %.0f cycles/s = %.2f× unkeyed (%.0f); target ≥ 0.8×",
				n, keyed.median, keyed.median/plain.median, plain.median)
		}
		if many, few := t.get(activeMany, iso), t.get(active100, iso); many.runs > 0 && few.runs > 0 {
			mp, fp := many.pooled.Percentile(99), few.pooled.Percentile(99)
			scale := ""
			if holders+keyGoroutines < 10000 {
				scale = " (the target is at 10 000 keys: -key-holders 9984)"
			}
			check(float64(mp) <= 1.5*float64(fp), "%s: %d holders, %d keys active: acquire p99 %s = %.2f× with 100 keys active (%s); target ≤ 1.5×%s",
				n, holders, holders+keyGoroutines, ms(mp), float64(mp)/float64(fp), ms(fp), scale)
		}
	}
	failed, violations := int64(0), int64(0)
	for _, kind := range []string{keyedNone, keyed1000, active100, activeMany} {
		for _, iso := range isolations {
			failed += t.get(kind, iso).pooled.Failed
			violations += t.get(kind, iso).pooled.Violations
		}
	}
	check(failed == 0, "failed acquisitions in the key scenarios: %d; target 0", failed)
	check(violations == 0, "grants over the task's or a key's limit in the key scenarios (from the database's grant and end times): %d; must be 0", violations)
}

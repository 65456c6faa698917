package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskling-go/taskling/taskling"
)

// The key scenarios (issue 26, docs/keys.md) measure what keys cost a start: cycles on one task
// whose starts carry keys against the same cycles without, and starts while many keys are active
// at once against the same load spread over few keys.

// KeyedCycles runs StartExecution(WaitForSlot) + Complete cycles of goroutines on one task of
// app. With keys > 0 each start names one of keys keys, drawn at random (so that a key now and
// then reaches its limit and its start waits); with keys 0 the starts have no key, the same
// scenario unkeyed. The client must declare the task's limit and key limit (KeyedSettings).
// Afterwards it counts, from the database's grant and end times, the grants that took the task
// over limit or a key over keyLimit (0: none) as violations.
func KeyedCycles(ctx context.Context, client *taskling.Client, app string, goroutines, keys, limit, keyLimit int, d time.Duration) (Result, error) {
	retriesBefore := client.Stats().Retries
	var failed atomic.Int64
	rngs := make([]*rand.Rand, goroutines)
	for g := range rngs {
		rngs[g] = rand.New(rand.NewPCG(uint64(g), 26))
	}
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, g int) error {
		opts := &taskling.StartOptions{WaitForSlot: true}
		if keys > 0 {
			opts.Key = fmt.Sprintf("customer-%d", rngs[g].IntN(keys))
		}
		return waitCycle(ctx, client, app, "keyed", opts, &failed)
	})
	if err != nil {
		return res, err
	}
	res.Retries = client.Stats().Retries - retriesBefore
	res.Failed = failed.Load()
	res.Violations, err = overLimits(ctx, client, app, "keyed", limit, keyLimit)
	return res, err
}

// KeyedSettings are the settings of KeyedCycles' task: limit, and keyLimit per key when keyed.
func KeyedSettings(limit, keyLimit int) taskling.TaskSettings {
	return taskling.TaskSettings{ConcurrencyLimit: limit, KeyLimit: keyLimit}
}

// ActiveKeys is the scale scenario: holders executions of one task of app are started and held
// over keys keys (holder j under key j mod keys), then goroutines start and complete executions
// for d, goroutine g under keys g, g+goroutines, g+2·goroutines, … (its own, among the same
// keys), and the result's latencies are those of the starts alone. The client must declare
// ActiveKeysSettings. Every key is then active (a holder, or a start of the measured ones) while
// the task holds as many executions whatever keys is, so that two runs differ in the keys alone.
// Afterwards the holders complete, and violations of the task's and keys' limits are counted from
// the database.
func ActiveKeys(ctx context.Context, client *taskling.Client, app string, goroutines, holders, keys int, d time.Duration) (Result, error) {
	if keys < goroutines || holders < keys-goroutines {
		return Result{}, fmt.Errorf("bench: want goroutines ≤ keys ≤ holders + goroutines, got %d, %d, %d", goroutines, keys, holders)
	}
	limit, keyLimit := activeKeysLimits(goroutines, holders, keys)
	key := func(i int) string { return fmt.Sprintf("tenant-%d", i) }
	held, err := holdAll(ctx, client, app, holders, func(j int) string { return key(j % keys) })
	defer func() { _ = completeAll(context.WithoutCancel(ctx), held) }()
	if err != nil {
		return Result{}, err
	}
	retriesBefore := client.Stats().Retries
	var failed atomic.Int64
	perG := keys / goroutines
	next := make([]int, goroutines)
	var acquires acquireTimes
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, g int) error {
		k := g + goroutines*(next[g]%perG)
		next[g]++
		return acquires.cycle(ctx, func() (*taskling.Execution, error) {
			return client.StartExecution(ctx, app, "active-keys", &taskling.StartOptions{Key: key(k)})
		}, func(err error) bool {
			if errors.Is(err, taskling.ErrLimitReached) {
				failed.Add(1)
				return true
			}
			return false
		})
	})
	res.Latencies = acquires.d
	if err != nil {
		return res, err
	}
	res.Retries = client.Stats().Retries - retriesBefore
	res.Failed = failed.Load()
	err = completeAll(ctx, held)
	held = nil
	if err != nil {
		return res, err
	}
	res.Violations, err = overLimits(ctx, client, app, "active-keys", limit, keyLimit)
	return res, err
}

// activeKeysLimits are ActiveKeys' task limit (every holder and every goroutine) and key limit
// (the most holders of one key, plus one measured start).
func activeKeysLimits(goroutines, holders, keys int) (limit, keyLimit int) {
	return holders + goroutines, (holders+keys-1)/keys + 1
}

// ActiveKeysSettings are the settings of ActiveKeys' task.
func ActiveKeysSettings(goroutines, holders, keys int) taskling.TaskSettings {
	limit, keyLimit := activeKeysLimits(goroutines, holders, keys)
	return taskling.TaskSettings{ConcurrencyLimit: limit, KeyLimit: keyLimit}
}

// holdAll starts n executions of app/active-keys, execution j under key(j), from 16 goroutines,
// and returns those it started (all of them, unless it failed).
func holdAll(ctx context.Context, client *taskling.Client, app string, n int, key func(j int) string) ([]*taskling.Execution, error) {
	held := make([]*taskling.Execution, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < n; j = int(next.Add(1) - 1) {
				e, err := client.StartExecution(ctx, app, "active-keys", &taskling.StartOptions{Key: key(j)})
				if err != nil {
					errs <- fmt.Errorf("holder %d: %w", j, err)
					return
				}
				held[j] = e
			}
		})
	}
	wg.Wait()
	close(errs)
	var out []*taskling.Execution
	for _, e := range held {
		if e != nil {
			out = append(out, e)
		}
	}
	return out, <-errs
}

// completeAll completes held from 16 goroutines (their completions share transactions).
func completeAll(ctx context.Context, held []*taskling.Execution) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < len(held); j = int(next.Add(1) - 1) {
				if err := held[j].Complete(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

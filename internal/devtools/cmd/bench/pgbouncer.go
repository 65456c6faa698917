package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/internal/devtools/pgbouncer"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// The PgBouncer scenarios: StartExecution + Complete cycles through a transaction-pooling
// PgBouncer against the same cycles straight to the server, interleaved over the runs; and the
// handover between two processes (clients) with each way of learning of a freed slot.

// route is one way of reaching the server.
type route struct {
	name   string
	bounce bool                // through pgbouncer
	mode   pgx.QueryExecMode   // the pool's exec mode; 0: pgx's default
	pooler taskling.PoolerMode // Config.Pooler
	listen bool                // with Pooler PoolerTransaction: a direct listener
}

var (
	directDefault  = route{name: "direct, pgx default exec mode"}
	directDescribe = route{name: "direct, cache_describe", mode: pgx.QueryExecModeCacheDescribe}
	bouncedListen  = route{name: "pgbouncer, cache_describe", bounce: true, mode: pgx.QueryExecModeCacheDescribe, pooler: taskling.PoolerTransaction, listen: true}
	bouncedPolling = route{name: "pgbouncer, cache_describe, no listener", bounce: true, mode: pgx.QueryExecModeCacheDescribe, pooler: taskling.PoolerTransaction}
)

type bouncerResult struct {
	version   string
	d         time.Duration
	cycles    map[string][]bench.Result // by cycle kind + "|" + route name
	handovers []handoverRow
}

type handoverRow struct {
	route     route
	hold      time.Duration
	latencies []time.Duration
}

var bouncerCycleKinds = []struct {
	name            string
	goroutines, tks int
}{{"1 goroutine, 1 task", 1, 1}, {"16 goroutines, 1 task", 16, 1}, {"64 goroutines, 64 tasks", 64, 64}}

// pgbouncer runs the PgBouncer scenarios; nil (and a note) when pgbouncer is not installed.
func (e *environment) pgbouncer(ctx context.Context, d time.Duration, runs, handovers int) (*bouncerResult, error) {
	if _, err := pgbouncer.Find(); errors.Is(err, pgbouncer.ErrNotInstalled) {
		fmt.Printf("pgbouncer: skipped: %v\n", err)
		return nil, nil
	}
	b, err := pgbouncer.Start(ctx, e.serverURL, nil)
	if err != nil {
		return nil, err
	}
	defer b.Stop(context.Background())
	r := &bouncerResult{version: b.Version(), d: d, cycles: map[string][]bench.Result{}}
	for run := range runs {
		fmt.Printf("pgbouncer: cycles, run %d/%d\n", run+1, runs)
		for _, k := range bouncerCycleKinds {
			for _, rt := range []route{directDefault, directDescribe, bouncedListen} {
				res, err := e.bouncerCycles(ctx, b, rt, k.goroutines, k.tks, d)
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", k.name, rt.name, err)
				}
				r.cycles[k.name+"|"+rt.name] = append(r.cycles[k.name+"|"+rt.name], res)
			}
		}
	}
	for _, h := range []struct {
		rt   route
		hold time.Duration
		n    int
	}{{directDefault, 2 * time.Millisecond, handovers}, {bouncedListen, 2 * time.Millisecond, handovers},
		{bouncedPolling, 2 * time.Millisecond, handovers}, {bouncedPolling, 500 * time.Millisecond, 10}} {
		fmt.Printf("pgbouncer: handover, %s, hold %s…\n", h.rt.name, h.hold)
		lat, err := e.bouncerHandover(ctx, b, h.rt, h.n, h.hold)
		if err != nil {
			return nil, fmt.Errorf("handover, %s: %w", h.rt.name, err)
		}
		r.handovers = append(r.handovers, handoverRow{route: h.rt, hold: h.hold, latencies: lat})
	}
	return r, nil
}

// bouncerDB makes a fresh database and returns its direct URL, the URL a route uses, and a
// function that drops it.
func (e *environment) bouncerDB(ctx context.Context, b *pgbouncer.Bouncer, rt route) (direct, url string, drop func(), err error) {
	db, err := pgtest.CreateDatabase(ctx, e.serverURL, true)
	if err != nil {
		return "", "", nil, err
	}
	drop = func() { _ = db.Drop(context.Background()) }
	url = db.URL
	if rt.bounce {
		if url, err = b.URL(db.URL); err != nil {
			drop()
			return "", "", nil, err
		}
	}
	return db.URL, url, drop, nil
}

// bouncerClient opens a pool on url as rt says and a client on it; close closes both.
func bouncerClient(ctx context.Context, rt route, direct, url, host string, s taskling.TaskSettings) (client *taskling.Client, close func(), err error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	if rt.mode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = rt.mode
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	tc := &taskling.Config{HostName: host, Defaults: s, Pooler: rt.pooler}
	if rt.listen && rt.pooler == taskling.PoolerTransaction {
		tc.ListenerConnString = direct
	}
	if client, err = taskling.NewClient(pool, tc); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return client, func() { client.Close(); pool.Close() }, nil
}

func (e *environment) bouncerCycles(ctx context.Context, b *pgbouncer.Bouncer, rt route, goroutines, tasks int, d time.Duration) (bench.Result, error) {
	direct, url, drop, err := e.bouncerDB(ctx, b, rt)
	if err != nil {
		return bench.Result{}, err
	}
	defer drop()
	client, closeClient, err := bouncerClient(ctx, rt, direct, url, "bench", bench.Settings(goroutines, tasks))
	if err != nil {
		return bench.Result{}, err
	}
	defer closeClient()
	if _, err := bench.Taskling(ctx, client, "bench", goroutines, tasks, 200*time.Millisecond); err != nil { // warm up
		return bench.Result{}, err
	}
	res, err := bench.Taskling(ctx, client, "bench", goroutines, tasks, d)
	if err == nil && res.Violations > 0 {
		err = fmt.Errorf("%d grants over the limit", res.Violations)
	}
	return res, err
}

// bouncerHandover runs the ping-pong of two processes (clients with pools of their own), n grants
// each holding hold, and returns the handover latencies.
func (e *environment) bouncerHandover(ctx context.Context, b *pgbouncer.Bouncer, rt route, n int, hold time.Duration) ([]time.Duration, error) {
	direct, url, drop, err := e.bouncerDB(ctx, b, rt)
	if err != nil {
		return nil, err
	}
	defer drop()
	logs := make([][]bench.Handoff, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		client, closeClient, err := bouncerClient(ctx, rt, direct, url, fmt.Sprint("bench-", i), taskling.TaskSettings{ConcurrencyLimit: 1})
		if err != nil {
			return nil, err
		}
		defer closeClient()
		wg.Go(func() { logs[i], errs[i] = bench.PingPong(ctx, client, "bench", "pingpong", n, hold) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return bench.HandoverLatencies(logs), nil
}

func (r *bouncerResult) print() {
	fmt.Printf("Through %s in transaction pooling mode (cycles: median of %d interleaved runs of %s; the client on pgbouncer with Pooler PoolerTransaction):\n",
		r.version, len(r.cycles[bouncerCycleKinds[0].name+"|"+directDefault.name]), r.d)
	routes := []route{directDefault, directDescribe, bouncedListen}
	fmt.Printf("  %-26s", "cycles/s")
	for _, rt := range routes {
		fmt.Printf(" %28s", rt.name)
	}
	fmt.Printf(" %14s %14s\n", "vs direct", "vs same mode")
	for _, k := range bouncerCycleKinds {
		fmt.Printf("  %-26s", k.name)
		var rates []float64
		for _, rt := range routes {
			s := summarize(r.cycles[k.name+"|"+rt.name])
			rates = append(rates, s.median)
			fmt.Printf(" %28.0f", s.median)
		}
		fmt.Printf(" %13.2f× %13.2f×\n", rates[2]/max(1, rates[0]), rates[2]/max(1, rates[1]))
	}
	fmt.Println("  handover, Complete in one process → StartExecution(WaitForSlot) returns in another:")
	for _, h := range r.handovers {
		how := "LISTEN on a connection like the pool's"
		switch {
		case h.route.bounce && h.route.listen:
			how = "listener on a direct connection (Config.ListenerConnString)"
		case h.route.bounce:
			how = "no listener: the waiter polls (50 ms, doubling up to MaxPollInterval 2s)"
		}
		l := bench.Result{Latencies: h.latencies}
		fmt.Printf("    %-40s %-72s holds %6s: p50 %9s, p99 %9s (n=%d)\n", h.route.name, how, h.hold, ms(l.Percentile(50)), ms(l.Percentile(99)), len(h.latencies))
	}
}

package taskling_test

// Taskling behind a real PgBouncer (Debian's 1.18: no prepared statements in transaction mode)
// in transaction pooling mode, configured as the README's PgBouncer section says. Without a
// pgbouncer binary these tests skip, except under CI, where they fail (.ci/run installs it).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskling-go/taskling/internal/devtools/pgbouncer"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// bounced is a fresh database behind a pgbouncer of its own, in transaction mode.
type bounced struct {
	ctx     context.Context
	direct  *pgxpool.Pool // straight to the server: the test's own queries
	dbURL   string        // straight to the server: the listeners'
	url     string        // through pgbouncer
	bouncer *pgbouncer.Bouncer
}

func newBounced(t *testing.T) *bounced {
	t.Helper()
	direct, dbURL := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgtest.DatabaseURL(t))
	return &bounced{ctx: context.Background(), direct: direct, dbURL: dbURL, url: b.MustURL(t, dbURL), bouncer: b}
}

// pool is a pool through pgbouncer, configured as the README says: exec mode
// QueryExecModeCacheDescribe, or mode.
func (x *bounced) pool(t *testing.T, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(x.url)
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	if mode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = mode
	}
	pool, err := pgxpool.NewWithConfig(x.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// client is one process behind pgbouncer, with a pool of its own (exec mode as pool says);
// listen gives it a direct listener, else its waiters poll.
func (x *bounced) client(t *testing.T, host string, listen bool, mode pgx.QueryExecMode, cfg taskling.Config) *taskling.Client {
	t.Helper()
	cfg.HostName, cfg.Pooler = host, taskling.PoolerTransaction
	if listen {
		cfg.ListenerConnString = x.dbURL
	}
	return newClient(t, x.pool(t, mode), &cfg)
}

// bundle is a testBundle on the direct pool, for the helpers that read the task's row.
func (x *bounced) bundle(c *taskling.Client) *testBundle {
	return &testBundle{ctx: x.ctx, pool: x.direct, client: c, app: "app", task: "task"}
}

func limited(limit int) taskling.Config {
	s := fast
	s.ConcurrencyLimit = limit
	return taskling.Config{Defaults: s}
}

// grantsOverLimit sweeps every task's grants in database time (a grant at its start, its end at
// its completion or reclaim; ends first at one instant) and returns, per task, the most holders
// there ever were at once; and the number of grants whose fence is not above the one granted
// before it.
func grantsOverLimit(t *testing.T, pool *pgxpool.Pool) (most map[string]int, badFences int) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
WITH g AS (
    SELECT d.task_name AS task, e.started_at, x.ended_at, e.fence FROM taskling.task_execution e
    JOIN taskling.task_definition d ON d.id = e.task_id
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    WHERE e.token_id IS NOT NULL
), ev AS (
    SELECT task, started_at AS at, 1 AS delta FROM g
    UNION ALL SELECT task, ended_at, -1 FROM g WHERE ended_at IS NOT NULL
)
SELECT task, max(n)::int FROM (SELECT task, sum(delta) OVER (PARTITION BY task ORDER BY at, delta ROWS UNBOUNDED PRECEDING) AS n FROM ev) s
GROUP BY task`)
	require.NoError(t, err)
	most = map[string]int{}
	for rows.Next() {
		var task string
		var n int
		require.NoError(t, rows.Scan(&task, &n))
		most[task] = n
	}
	require.NoError(t, rows.Err())
	require.NoError(t, pool.QueryRow(context.Background(), `
SELECT count(*) FROM (SELECT fence, lag(fence) OVER (PARTITION BY task_id ORDER BY started_at, id) AS prev
    FROM taskling.task_execution WHERE token_id IS NOT NULL) f WHERE fence <= prev`).Scan(&badFences))
	return most, badFences
}

// TestPgBouncerPgxDefaultsFail is the failure the Pooler check prevents: through PgBouncer 1.18
// in transaction mode, pgx's default exec mode breaks starts with errors about prepared
// statements, and NewClient refuses that pool once Config.Pooler says where it goes.
func TestPgBouncerPgxDefaultsFail(t *testing.T) {
	t.Parallel()
	x := newBounced(t)
	pool := x.pool(t, pgx.QueryExecModeCacheStatement)
	_, err := taskling.NewClient(pool, &taskling.Config{HostName: "h", Pooler: taskling.PoolerTransaction})
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.ErrorContains(t, err, "DefaultQueryExecMode")

	c := newClient(t, pool, &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 100}})
	var prepared atomic.Int64
	ctx, cancel := context.WithTimeout(x.ctx, 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for ctx.Err() == nil && prepared.Load() == 0 {
				e, err := c.StartExecution(ctx, "app", fmt.Sprint("task", g%3), nil)
				if err == nil {
					err = e.Complete(ctx)
				}
				if err != nil && strings.Contains(err.Error(), "prepared statement") {
					prepared.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Positive(t, prepared.Load(), "no start failed on a prepared statement in 10s")
}

// TestPgBouncerListenerProbeWarns: with Config.Pooler left unset behind a transaction pooler, the
// listener's LISTEN lands on a pooled server connection; the client notices that its own probe
// notification never arrives, and says what to set.
func TestPgBouncerListenerProbeWarns(t *testing.T) {
	t.Parallel()
	x := newBounced(t)
	core, logs := observer.New(zap.WarnLevel)
	c := newClient(t, x.pool(t, 0), &taskling.Config{Logger: zap.New(core), Defaults: fast})
	holder, err := c.StartExecution(x.ctx, "app", "task", nil)
	require.NoError(t, err)
	defer holder.Complete(x.ctx)
	ctx, cancel := context.WithCancel(x.ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.StartExecution(ctx, "app", "task", &taskling.StartOptions{WaitForSlot: true}) // subscribes: listens
	}()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("did not reach the listener").Len() > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Contains(t, logs.FilterMessageSnippet("did not reach the listener").All()[0].Message, "Config.Pooler")
}

// TestPgBouncerSlotsNeverOverLimit: 4 processes × 6 goroutines start and complete on one task of
// limit 3 without waiting; at no instant do more than 3 hold, in the processes or in the
// database's record, and fences only grow. Its pools use the other exec mode NewClient accepts
// behind a transaction pooler, QueryExecModeExec.
func TestPgBouncerSlotsNeverOverLimit(t *testing.T) {
	t.Parallel()
	x := newBounced(t)
	const limit = 3
	var inside, most, granted, denied atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for p := range 4 {
		c := x.client(t, fmt.Sprint("p", p), p%2 == 0, pgx.QueryExecModeExec, limited(limit))
		for range 6 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					e, err := c.StartExecution(x.ctx, "app", "task", nil)
					if errors.Is(err, taskling.ErrLimitReached) {
						denied.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("start: %v", err)
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if err := e.Complete(x.ctx); err != nil {
						t.Errorf("complete: %v", err)
						return
					}
					granted.Add(1)
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d grants, %d denials, at most %d holders at once", granted.Load(), denied.Load(), most.Load())
	require.Positive(t, granted.Load())
	require.Positive(t, denied.Load(), "the limit was never reached: no contention tested")
	require.LessOrEqual(t, most.Load(), int64(limit))
	dbMost, badFences := grantsOverLimit(t, x.direct)
	require.LessOrEqual(t, dbMost["task"], limit)
	require.Zero(t, badFences)
}

// TestPgBouncerWaitersGrantedInOrder: waiters in two processes behind pgbouncer are granted in the
// order they queued, one handover after another, whether their processes listen on a direct
// connection or poll; the first handover's latency is bounded by the way they learn of it.
func TestPgBouncerWaitersGrantedInOrder(t *testing.T) {
	t.Parallel()
	for _, listen := range []bool{true, false} {
		name, bound := "direct listener", 250*time.Millisecond
		if !listen {
			name, bound = "polling", 500*time.Millisecond+250*time.Millisecond // MaxPollInterval + a cycle
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newBounced(t)
			// Liveness far from the test's timings: a waiter's session judged dead on a loaded
			// machine would lose its place in the queue.
			cfg := taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 1, KeepAliveInterval: 500 * time.Millisecond,
				KeepAliveDeathThreshold: 10 * time.Second}, MaxPollInterval: 500 * time.Millisecond}
			holderClient := x.client(t, "holder", listen, 0, cfg)
			b := x.bundle(holderClient)
			waiters := []*taskling.Client{x.client(t, "w1", listen, 0, cfg), x.client(t, "w2", listen, 0, cfg)}
			holder := b.start(t, nil)
			type grant struct {
				i  int
				at time.Time
			}
			granted := make(chan grant, 8)
			var wg sync.WaitGroup
			defer wg.Wait() // their Completes, before the pools close
			for i := range 4 {
				c := waiters[i%2] // every handover crosses processes
				wg.Go(func() {
					e, err := c.StartExecution(x.ctx, "app", "task", &taskling.StartOptions{WaitForSlot: true})
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
						granted <- grant{i: -1}
						return
					}
					granted <- grant{i, time.Now()}
					if err := e.Complete(x.ctx); err != nil {
						t.Errorf("waiter %d: %v", i, err)
					}
				})
				b.waitQueued(t, i+1)
			}
			time.Sleep(600 * time.Millisecond) // past the waiters' first polls
			listeners := 0
			if listen {
				listeners = 2 // the waiters' clients, on their direct connections; none through pgbouncer
			}
			require.Equal(t, listeners, b.count(t, `SELECT count(*) FROM pg_stat_activity
WHERE query = 'LISTEN taskling_slots' AND datname = current_database()`))
			require.NoError(t, holder.Complete(x.ctx))
			released := time.Now()
			var order []int
			for range 4 {
				g := <-granted
				if len(order) == 0 {
					t.Logf("first handover after %s", g.at.Sub(released).Round(time.Millisecond))
					require.Less(t, g.at.Sub(released), bound)
				}
				order = append(order, g.i)
			}
			require.Equal(t, []int{0, 1, 2, 3}, order)
			require.Zero(t, b.queueLength(t))
		})
	}
}

// TestPgBouncerScheduleRunsEachInstantOnce: three scheduler hosts behind pgbouncer (one with a
// direct listener, two polling) run a task scheduled every second: each instant runs exactly
// once, with none missed in between.
func TestPgBouncerScheduleRunsEachInstantOnce(t *testing.T) {
	t.Parallel()
	x := newBounced(t)
	var rec recorder
	var hosts []*cronHost
	for i := range 3 {
		name := fmt.Sprint("cron", i)
		c := x.client(t, name, i == 0, 0, taskling.Config{Defaults: fast})
		require.NoError(t, c.Schedule(x.ctx, "app", "cron", "* * * * * *", rec.fn(name, 100*time.Millisecond), nil))
		ctx, cancel := context.WithCancel(x.ctx)
		h := &cronHost{client: c, cancel: cancel, done: make(chan error, 1)}
		go func() { h.done <- c.RunScheduler(ctx) }()
		t.Cleanup(h.stop)
		hosts = append(hosts, h)
	}
	waitFor(t, 10*time.Second, "5 runs", func() bool { return len(rec.snapshot()) >= 5 })
	for _, h := range hosts {
		h.stop()
	}
	runs := rec.snapshot()
	ran, _ := scheduledExecutions(t, hosts[0].client)
	require.Len(t, ran, len(runs), "every run recorded, and no other")
	byHost := map[string]int{}
	for i, r := range runs {
		byHost[r.host]++
		require.True(t, ran[i].Equal(r.instant), "run for %s recorded as %s", r.instant, ran[i])
		if i > 0 {
			require.Equal(t, time.Second, r.instant.Sub(runs[i-1].instant), "instants %s and %s: one ran twice or one was missed", runs[i-1].instant, r.instant)
		}
	}
	t.Logf("%d instants, each once; runs per host %v", len(runs), byHost)
}

// TestPgBouncerMigrations: migrations.Up through pgbouncer, from three processes at once, as
// hosts starting together run it: each migration's transaction-scoped lock holds behind
// transaction pooling.
func TestPgBouncerMigrations(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewEmptyDB(t)
	b := pgbouncer.ForTest(t, pgtest.DatabaseURL(t))
	x := &bounced{ctx: context.Background(), dbURL: dbURL, url: b.MustURL(t, dbURL), bouncer: b}
	var wg sync.WaitGroup
	for range 3 {
		pool := x.pool(t, 0)
		wg.Go(func() {
			if err := migrations.Up(x.ctx, pool); err != nil {
				t.Errorf("migrations.Up: %v", err)
			}
		})
	}
	wg.Wait()
	c := x.client(t, "h", true, 0, limited(1))
	e, err := c.StartExecution(x.ctx, "app", "task", nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(x.ctx))
}

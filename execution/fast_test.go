package execution_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

// casCounter counts the fast path's writes (casTasksSQL: the task row written only if it is
// still the version the process knew).
type casCounter struct{ n atomic.Int64 }

func (c *casCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "d.xmin = u.xmin::xid") {
		c.n.Add(1)
	}
	return ctx
}

func (c *casCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *casCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *casCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.Contains(d.SQL, "d.xmin = u.xmin::xid") {
		c.n.Add(1)
	}
}

func (c *casCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestAContendedTaskBacksOffTheFastPath: two processes whose requests on one task alternate each
// find the row changed by the other at every fast attempt — a wasted round trip and an aborted transaction
// before the usual path. After a failed attempt a process skips the fast path for a number of
// batches that doubles with each failure (up to 32), so 60 turns make a handful of attempts, not
// 60; alone on the task again, the first success brings it back at every batch.
func TestAContendedTaskBacksOffTheFastPath(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cas := &casCounter{}
	cfg.ConnConfig.Tracer = cas
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	a, b := setupOn(t, pool, url, nil), setupOn(t, pool, url, nil)
	cycle := func(p *testBundle) { p.release(t, p.acquire(t, 4)) }
	cycle(a)
	cycle(b) // each knows the row now

	cas.n.Store(0)
	const turns = 30
	for range turns {
		ra, rb := a.acquire(t, 4), b.acquire(t, 4)
		a.release(t, ra)
		b.release(t, rb)
	}
	attempts := cas.n.Load()
	t.Logf("%d fast attempts over %d contended batches", attempts, 4*turns)
	require.LessOrEqual(t, attempts, int64(20), "fast attempts over %d contended batches", 4*turns)
	require.Positive(t, attempts, "a contended task still tries the fast path now and then")

	// b alone: once its backoff runs out an attempt succeeds, and every batch is fast again.
	for range 2 * 32 {
		cycle(b)
	}
	cas.n.Store(0)
	for range 10 {
		cycle(b)
	}
	require.Equal(t, int64(20), cas.n.Load(), "alone on its task, every acquire and release takes the fast path")
}

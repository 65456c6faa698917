package execution_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

// stmtCounter counts the statements whose text holds marker: casMarker counts the fast path's
// writes (casTasksSQL: the task row written only if it is still the version the process knew).
type stmtCounter struct {
	marker string
	n      atomic.Int64
}

const casMarker = "d.xmin = u.xmin::xid"

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.marker) {
		c.n.Add(1)
	}
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *stmtCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.Contains(d.SQL, c.marker) {
		c.n.Add(1)
	}
}

func (c *stmtCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// counted is a pool on url whose statements holding marker are counted.
func counted(t *testing.T, url, marker string) (*pgxpool.Pool, *stmtCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	c := &stmtCounter{marker: marker}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, c
}

// TestAContendedTaskBacksOffTheFastPath: two processes whose requests on one task alternate each
// find the row changed by the other at every fast attempt — a wasted round trip and an aborted transaction
// before the usual path. After a failed attempt a process skips the fast path for a number of
// batches that doubles with each failure (up to 32), so 60 turns make a handful of attempts, not
// 60; alone on the task again, the first success brings it back at every batch.
func TestAContendedTaskBacksOffTheFastPath(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDB(t)
	pool, cas := counted(t, url, casMarker)
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

// TestTheUsualPathTakesIdsReservedAhead: acquisitions that take the usual path (two processes
// alternating on one task: the fast path backs off) take their execution ids from those their
// process reserved ahead, as the fast path does, so most of their transactions reserve none.
func TestTheUsualPathTakesIdsReservedAhead(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDB(t)
	pool, reserves := counted(t, url, "FROM generate_series(1, $1)")
	a, b := setupOn(t, pool, url, nil), setupOn(t, pool, url, nil)
	const turns = 30
	seen := map[int64]bool{}
	for range turns {
		ra, rb := a.acquire(t, 4), b.acquire(t, 4)
		for _, id := range []int64{ra.ExecutionID, rb.ExecutionID} {
			require.False(t, seen[id], "execution id %d given twice", id)
			seen[id] = true
		}
		a.release(t, ra)
		b.release(t, rb)
	}
	n := reserves.n.Load()
	t.Logf("%d reservations for %d acquisitions", n, 2*turns)
	// A reservation of 16 lasts at least 8 acquisitions of a process.
	require.LessOrEqual(t, n, int64(2*(turns/8+2)), "reservations for %d acquisitions", 2*turns)
}

// TestIdsReservedBeforeAFailoverAreNotUsedAfterIt: a process holds ids reserved ahead when its
// database fails over to a standby that had not received that reservation — the new primary's
// sequence hands the same ids out again, here to another process. The process's next start, on
// the usual path, reads the new epoch in its transaction and reserves its id anew rather than
// take one of those.
func TestIdsReservedBeforeAFailoverAreNotUsedAfterIt(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	ctx := context.Background()
	a := setupOn(t, pool, url, nil)
	first := a.acquire(t, 100)
	a.release(t, first)
	var reservedTo int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_value FROM taskling.task_execution_id_seq`).Scan(&reservedTo))
	require.Greater(t, reservedTo, first.ExecutionID+8, "ids reserved ahead")

	// The failover: the sequence is back to just after first's id, on an epoch of its own (held
	// by no one: it began an hour ago).
	_, err := pool.Exec(ctx, `SELECT setval('taskling.task_execution_id_seq', $1)`, first.ExecutionID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE taskling.epoch SET since = clock_timestamp() - interval '1 hour'`)
	require.NoError(t, err)
	b := setupOn(t, pool, url, nil)
	for range 20 { // b's executions take the ids a holds
		b.release(t, b.acquire(t, 100))
	}

	res, err := a.store.Acquire(ctx, a.request(100)) // b wrote the row since: the usual path
	require.NoError(t, err)
	require.Equal(t, execution.NotDenied, res.Denied)
	require.Greater(t, res.ExecutionID, first.ExecutionID+20)
	a.release(t, res)
}

// TestAReleaseOfAnUntakenGrantIsNotServedFromTheCachedRow: a grant to a ticket whose take a
// failover lost is still pending when its execution completes. The releasing process may know
// the task row as it is (it wrote it last), but that row cannot tell such a grant from any other:
// the release takes the usual path, which finds the grant untaken, gives the slot back and
// reports the lease lost instead of recording an end for an execution the database never
// started.
func TestAReleaseOfAnUntakenGrantIsNotServedFromTheCachedRow(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewDB(t)
	ctx := context.Background()
	p, cas := counted(t, url, casMarker)
	c, a := setupOn(t, pool, url, nil), setupOn(t, p, url, nil)
	holder := c.acquire(t, 1)
	// A direct ticket of a's session, first in line, with an offer window of 10 s (X odd).
	const ticket = int64(1) << 50
	_, err := pool.Exec(ctx, `UPDATE taskling.task_definition SET queue = 'W:' || $1::bigint || ',P:' || $2::bigint || ',R:0,Q:' ||
        (extract(epoch FROM clock_timestamp()) * 1000000)::bigint || ',O:0,D:10000000,X:10000001' WHERE id = $3`, ticket, a.session, a.taskID)
	require.NoError(t, err)
	c.release(t, holder) // hands the slot to the ticket
	var token uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT token_id FROM taskling.handoff WHERE exec_id = $1 AND lapsed_at IS NULL`, ticket).Scan(&token))
	refused, err := a.store.Acquire(ctx, a.request(1)) // a reads the row as it is now: its cache knows it
	require.NoError(t, err)
	require.Equal(t, execution.DeniedLimit, refused.Denied)

	// The take is lost: the ticket's execution was never started here, and now completes.
	cas.n.Store(0)
	rel, err := a.store.Release(ctx, execution.ReleaseRequest{TaskID: a.taskID, TaskName: "app/task", ExecutionID: ticket, TokenID: token})
	require.NoError(t, err)
	require.Equal(t, int64(1), cas.n.Load(), "the fast path was tried")
	require.True(t, rel.LeaseLost)
	var lapsed, ended int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM taskling.handoff WHERE exec_id = $1 AND lapsed_at IS NOT NULL),
        (SELECT count(*) FROM taskling.execution_end WHERE execution_id = $1)`, ticket).Scan(&lapsed, &ended))
	require.Equal(t, 1, lapsed, "the grant was taken back")
	require.Zero(t, ended, "no end for an execution never started")
	a.release(t, a.acquire(t, 1)) // the slot is free
}

package taskling_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// A primary that stays up read-only (a managed failover, a demoted leader) answers every write
// with SQLSTATE 25006 on connections that are otherwise healthy. These tests turn a server
// read-only with ALTER SYSTEM, which also changes the sessions already open, so each runs on a
// server of its own: the private cluster is shared by the package's parallel tests. They do not
// run in parallel with those: starting a server is a burst of CPU that timing tests could feel.

// skipWithoutServers skips when the server binaries are missing, except under CI.
func skipWithoutServers(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, pgcluster.ErrNoBinaries) || errors.Is(err, pgcluster.ErrNoBasebackup) {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %v", err)
		}
		t.Skip(err)
	}
	require.NoError(t, err)
}

// serverDir is a directory for servers of a test's own, which the postgres OS user can reach.
func serverDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "taskling-ro-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// setReadOnly turns default_transaction_read_only on or off on the server at url, for every
// session including those open, and waits until a session opened before sees it.
func setReadOnly(t *testing.T, url string, on bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	stmt, want := "ALTER SYSTEM RESET default_transaction_read_only", "off"
	if on {
		stmt, want = "ALTER SYSTEM SET default_transaction_read_only = on", "on"
	}
	_, err = conn.Exec(ctx, stmt)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var got string
		return conn.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&got) == nil && got == want
	}, 10*time.Second, 10*time.Millisecond)
}

// backendPIDs opens n pooled connections at once and returns their server processes.
func backendPIDs(t *testing.T, pool *pgxpool.Pool, n int) []uint32 {
	t.Helper()
	var pids []uint32
	var conns []*pgxpool.Conn
	for range n {
		c, err := pool.Acquire(context.Background())
		require.NoError(t, err)
		conns = append(conns, c)
		pids = append(pids, c.Conn().PgConn().PID())
	}
	for _, c := range conns {
		c.Release()
	}
	return pids
}

// writeOnEveryIdleConn runs a write on every idle pooled connection and returns the errors.
func writeOnEveryIdleConn(t *testing.T, pool *pgxpool.Pool) []error {
	t.Helper()
	var errs []error
	for _, c := range pool.AcquireAllIdle(context.Background()) {
		if _, err := c.Exec(context.Background(), "UPDATE taskling.task_definition SET fence = fence WHERE false"); err != nil {
			errs = append(errs, err)
		}
		c.Release()
	}
	return errs
}

// Before the fix a start failed with the bare 25006 error (not ErrDatabaseReadOnly), and the
// connections that answered it went back to the pool and stayed open.
func TestReadOnlyPrimaryFailsStartsClearlyAndClosesItsConnections(t *testing.T) {
	ctx := context.Background()
	c, err := pgcluster.Ensure(ctx, &pgcluster.Options{Dir: serverDir(t)})
	skipWithoutServers(t, err)
	t.Cleanup(func() { _ = c.StopMode(context.Background(), pgcluster.StopImmediate) })
	db, err := pgtest.CreateDatabase(ctx, c.URL(), true)
	require.NoError(t, err)
	const connectTimeout = 2 * time.Second
	pool, err := pgxpool.New(ctx, db.URL+"&target_session_attrs=read-write&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client := newClient(t, pool, &taskling.Config{Defaults: fast})
	e, err := client.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	pooled := backendPIDs(t, pool, 3)

	setReadOnly(t, c.URL(), true)
	began := time.Now()
	_, err = client.StartExecution(ctx, "app", "task", nil)
	took := time.Since(began)
	require.ErrorIs(t, err, taskling.ErrDatabaseReadOnly, "%v", err)
	require.Less(t, took, connectTimeout, "a start fails within the connect timeout")
	t.Logf("a start on the read-only server failed in %s: %v", took.Round(time.Millisecond), err)
	// The connections that answered 25006, and every other one to that server, are closed.
	require.Eventually(t, func() bool {
		var open int
		err := withAdmin(t, c.URL(), func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", pooled).Scan(&open)
		})
		return err == nil && open == 0
	}, 5*time.Second, 20*time.Millisecond, "the pooled connections to the read-only server are closed")

	setReadOnly(t, c.URL(), false)
	off := time.Now()
	require.Eventually(t, func() bool {
		e, err := client.StartExecution(ctx, "app", "task", nil)
		if err != nil {
			return false
		}
		require.NoError(t, e.Complete(ctx))
		return true
	}, 2*time.Second, 20*time.Millisecond, "a start succeeds within 2 s once the server is writable")
	t.Logf("writable → first start: %s", time.Since(off).Round(time.Millisecond))
	backendPIDs(t, pool, 3)
	require.Empty(t, writeOnEveryIdleConn(t, pool), "no pooled connection answers 25006 afterwards")
}

func withAdmin(t *testing.T, url string, f func(*pgx.Conn) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(conn)
}

// The fault as it happens: the writes move to a promoted standby while the old primary stays up
// read-only, and the pool's connections to it stay healthy. Before the fix every start failed
// with 25006 until the connections reached their lifetime (an hour by default). Then a rate's hold
// on the new timeline (checkRateHoldAfterFailover).
func TestClientFollowsFailoverFromPrimaryLeftReadOnly(t *testing.T) {
	ctx := context.Background()
	p, err := pgcluster.NewPair(ctx, &pgcluster.PairOptions{Dir: serverDir(t), Mode: pgcluster.Asynchronous})
	skipWithoutServers(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	pool, err := pgxpool.New(ctx, p.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.Up(ctx, pool))
	client := newClient(t, pool, &taskling.Config{Defaults: fast})
	e, err := client.StartExecution(ctx, "app", "task", &taskling.StartOptions{WaitForSlot: true}) // starts the listener
	require.NoError(t, err)
	require.NoError(t, e.Complete(ctx))
	backendPIDs(t, pool, 4)
	oldPrimary, newPrimary := p.Primary(), p.Standby()
	require.NoError(t, p.WaitCaughtUp(ctx))

	setReadOnly(t, oldPrimary.URL(), true)
	promoted, err := p.Promote(ctx)
	require.NoError(t, err)
	var last error
	started := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// A new timeline holds grants for one death threshold (see the README): wait for it.
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		e, last = client.StartExecution(wctx, "app", "task", &taskling.StartOptions{WaitForSlot: true})
		cancel()
		if last == nil {
			require.NoError(t, e.Complete(ctx))
			started = true
			break
		}
	}
	require.True(t, started, "no start succeeded on the new primary within 10 s: %v", last)
	t.Logf("promotion → first start: %s", time.Since(promoted).Round(time.Millisecond))
	backendPIDs(t, pool, 4)
	require.Empty(t, writeOnEveryIdleConn(t, pool), "no pooled connection answers 25006 afterwards")
	// The listener follows: it would otherwise wait on the old server, which no longer notifies.
	require.Eventually(t, func() bool {
		var n int
		err := withAdmin(t, newPrimary.URL(), func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN %'").Scan(&n)
		})
		return err == nil && n == 1
	}, 10*time.Second, 50*time.Millisecond, "the client listens on the new primary")
	checkRateHoldAfterFailover(t, pool)
}

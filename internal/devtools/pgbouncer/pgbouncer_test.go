package pgbouncer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/internal/devtools/pgbouncer"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func backendPID(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var pid int
	if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestTransactionPooling: the Bouncer pools per transaction (a client's next statement may run
// on another server connection), and comes back on the same port after a kill.
func TestTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dbURL := pgtest.NewDB(t)
	b := pgbouncer.ForTest(t, pgtest.DatabaseURL(t))
	if !strings.HasPrefix(b.Version(), "PgBouncer ") {
		t.Errorf("version %q", b.Version())
	}
	url := b.MustURL(t, dbURL)
	a, c := connect(t, url), connect(t, url)

	// a holds a server connection inside its transaction, so c gets another one; once a
	// commits, pgbouncer lends c the one a gave back (last in, first out).
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pinned := backendPID(t, a)
	first := backendPID(t, c)
	if first == pinned {
		t.Fatalf("c ran on the server connection a's transaction holds (pid %d)", pinned)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if second := backendPID(t, c); second == first {
		t.Errorf("c ran on pid %d twice: not transaction pooling", first)
	}

	if err := b.Restart(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := a.Ping(ctx); err == nil {
		t.Error("a connection from before the kill still works")
	}
	backendPID(t, connect(t, url))
}

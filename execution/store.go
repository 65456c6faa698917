package execution

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Isolation is the isolation level of the token transactions.
type Isolation int

const (
	// ReadCommitted (the default) relies on the task row's lock, taken by the first statement of
	// every token transaction, and on rechecking each reclaimed holder under its own row lock.
	ReadCommitted Isolation = iota
	// Serializable also makes PostgreSQL prove that no two token transactions interleave. Its
	// page-granular predicate locks make unrelated tasks' transactions conflict (retried).
	Serializable
)

func (i Isolation) String() string {
	if i == Serializable {
		return "serializable"
	}
	return "read committed"
}

func (i Isolation) beginSQL() string {
	if i == Serializable {
		return "BEGIN ISOLATION LEVEL SERIALIZABLE"
	}
	return "BEGIN ISOLATION LEVEL READ COMMITTED"
}

// Options configure a Store; the zero value is the default.
type Options struct {
	Isolation Isolation
	// LibraryVersion is recorded on every execution row.
	LibraryVersion string
}

// Store runs taskling's SQL against a pool.
type Store struct {
	pool *pgxpool.Pool
	opts Options

	// Per-task combiners: one process's own token operations on a task are served together, so
	// cross-host contention is per host, not per goroutine.
	locksMu   sync.Mutex
	combiners map[int64]*combiner

	retries      atomic.Int64
	transactions atomic.Int64
	operations   atomic.Int64
}

// Stats are counters since the Store was created.
type Stats struct {
	// Transactions is the number of token transactions committed or rolled back without error.
	Transactions int64
	// Operations is the number of acquisitions and releases they served: more than Transactions
	// when concurrent requests of a task were coalesced.
	Operations int64
	// SerializationRetries is the number of token transactions retried after a serialization
	// failure, a deadlock, or a holder that renewed its lease while being reclaimed.
	SerializationRetries int64
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool, opts *Options) *Store {
	s := &Store{pool: pool, combiners: map[int64]*combiner{}}
	if opts != nil {
		s.opts = *opts
	}
	return s
}

// Pool returns the pool the Store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	return Stats{Transactions: s.transactions.Load(), Operations: s.operations.Load(), SerializationRetries: s.retries.Load()}
}

// SerializationRetries is Stats().SerializationRetries.
func (s *Store) SerializationRetries() int64 { return s.retries.Load() }

// IsRetryable reports whether err is a serialization failure (40001) or a deadlock (40P01): the
// transaction did nothing and may simply run again.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// IsConnectionError reports whether err means the connection failed, so the outcome of a
// statement in flight is unknown and the work may be retried on another connection if it is
// idempotent.
func IsConnectionError(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// admin_shutdown, crash_shutdown, cannot_connect_now, and class 08 (connection exception).
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || pgErr.Code[:2] == "08"
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	// A broken connection surfaces as a net error or io.EOF wrapped by pgconn.
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && isNetError(err)
}

// backoff sleeps a jittered, growing delay before retry attempt n (0-based), or returns ctx's
// error if it ends first.
func backoff(ctx context.Context, n int, base, limit time.Duration) error {
	d := base << min(n, 16)
	if d > limit || d <= 0 {
		d = limit
	}
	d = d/2 + rand.N(d/2+1) // equal jitter: never zero, never in lock-step
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runTx runs fn's transaction on a connection of its own; fn sends its batches through tx. If fn
// fails with the transaction open, it is rolled back (or the connection closed).
func (s *Store) runTx(ctx context.Context, fn func(ctx context.Context, tx *txConn) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx := &txConn{conn: conn.Conn(), begin: s.opts.Isolation.beginSQL()}
	err = fn(ctx, tx)
	if err != nil && tx.open {
		// The transaction is open (or aborted): end it so the connection goes back clean. If that
		// fails too the connection is closed, and the pool discards it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := tx.conn.Exec(rctx, "ROLLBACK"); rerr != nil {
			_ = tx.conn.Close(rctx)
		}
	}
	return err
}

// IdleInTransactionTimeout bounds how long a token transaction may sit idle between its two round
// trips before the server ends its session, releasing the task row's lock.
const IdleInTransactionTimeout = 5 * time.Second

var idleTimeoutSQL = fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", IdleInTransactionTimeout.Milliseconds())

// txConn sends the batches of one transaction: the first carries BEGIN, the last COMMIT.
type txConn struct {
	conn  *pgx.Conn
	begin string
	open  bool
}

// first sends BEGIN plus b's statements and returns their results.
func (t *txConn) first(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	full := &pgx.Batch{}
	full.Queue(t.begin)
	// A client cut off between the two round trips would otherwise keep the task row locked until
	// its socket dies (TCP keepalive: hours). The server ends such a session instead.
	full.Queue(idleTimeoutSQL)
	full.QueuedQueries = append(full.QueuedQueries, b.QueuedQueries...)
	t.open = true
	br := t.conn.SendBatch(ctx, full)
	for range 2 { // BEGIN, SET LOCAL
		if _, err := br.Exec(); err != nil {
			return errBatch{err: err, br: br}
		}
	}
	return br
}

// last sends b's statements plus COMMIT. Its results must be read in full (commit reports an
// error through Close).
func (t *txConn) last(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	b.Queue("COMMIT")
	return t.conn.SendBatch(ctx, b)
}

// errBatch reports err for every result, so callers read a batch the same way whether or not
// BEGIN failed.
type errBatch struct {
	err error
	br  pgx.BatchResults
}

func (e errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.err }
func (e errBatch) Query() (pgx.Rows, error)         { return nil, e.err }
func (e errBatch) QueryRow() pgx.Row                { return errRow{e.err} }
func (e errBatch) Close() error {
	_ = e.br.Close()
	return e.err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

const ensureTaskSQL = `
WITH ins AS (
    INSERT INTO taskling.task_definition (application_name, task_name)
    VALUES ($1, $2)
    ON CONFLICT (application_name, task_name) DO NOTHING
    RETURNING id
)
SELECT id FROM ins
UNION ALL
SELECT id FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2
LIMIT 1`

// EnsureTask returns the id of the task's row, creating the row on first use.
func (s *Store) EnsureTask(ctx context.Context, app, task string) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, ensureTaskSQL, app, task).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// Inserted concurrently by another host after our statement's snapshot: read it again.
		err = s.pool.QueryRow(ctx, `SELECT id FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2`, app, task).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("execution: ensure task %s/%s: %w", app, task, err)
	}
	return id, nil
}

// FindTask returns the id of the task's row, or ok=false if no execution of it ever started.
func (s *Store) FindTask(ctx context.Context, app, task string) (id int64, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT id FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2`, app, task).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("execution: find task %s/%s: %w", app, task, err)
	}
	return id, true, nil
}

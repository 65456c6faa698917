package execution

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure a Store; the zero value is the default.
type Options struct {
	// Serializable runs the token transactions at SERIALIZABLE instead of READ COMMITTED.
	Serializable bool
	// LibraryVersion is recorded on every execution row.
	LibraryVersion string
	// OnReadOnly hears that a statement found the server read-only, once the pool was reset
	// (readonly.go): connections of the caller's own to that server should be opened anew.
	OnReadOnly func()
}

func (o Options) beginSQL() string {
	if o.Serializable {
		return "BEGIN ISOLATION LEVEL SERIALIZABLE"
	}
	return "BEGIN ISOLATION LEVEL READ COMMITTED"
}

// Store runs taskling's SQL against a pool.
type Store struct {
	pool roPool // the caller's pool, watched for a read-only server (readonly.go)
	opts Options

	// comb combines this process's token operations (combine.go).
	comb combiner
	// cache holds task rows for the fast path (fast.go).
	cache rowCache
	// epoch is the server's timeline and its epoch, as the last token transaction read them.
	epoch atomic.Pointer[epoch]
	// epochs: whether the schema has taskling.epoch.
	epochs epochSupport
	// recent are the releases made lately, sent again after a failover (epoch.go).
	recent recentReleases
	// hb is the heartbeats' connection (session.go).
	hb heartbeatConn
	// keyLevels is, by task, the width level its keyed reads last needed (keys_io.go).
	keyLevels sync.Map
	// rated are the tasks whose last read found them under a rate: they never take the fast path,
	// since a rate needs the database's clock and state (rates_io.go).
	rated sync.Map
	// anchors are the rate states last read, for refusals decided on the cached rows (rates_fast.go).
	anchors rateAnchors

	retries        atomic.Int64
	transactions   atomic.Int64
	operations     atomic.Int64
	readOnlyResets atomic.Int64
}

// Operator is who makes an operator change, as the audit trail records it: the authenticated
// Principal, and By, a free-text note beside it.
type Operator struct {
	Principal string
	By        string
}

// DB runs SQL on the Store's pool, through its watch for a read-only server (readonly.go): what
// the feature stores (internal/store/...) use.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// DB returns the Store's pool for the feature stores.
func (s *Store) DB() DB { return s.pool }

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
	// ReadOnlyResets is the number of times a statement found the server read-only and the pool
	// was reset.
	ReadOnlyResets int64
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool, opts *Options) *Store {
	s := &Store{}
	s.pool = roPool{Pool: pool, s: s}
	if opts != nil {
		s.opts = *opts
	}
	s.comb.serializable = s.opts.Serializable
	return s
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	return Stats{Transactions: s.transactions.Load(), Operations: s.operations.Load(), SerializationRetries: s.retries.Load(),
		ReadOnlyResets: s.readOnlyResets.Load()}
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

// runTx runs fn's transaction on a connection of its own; fn sends its batches through tx. If fn
// fails with the transaction open, it is rolled back (or the connection closed); if it found the
// server read-only, the connection is not pooled again (readonly.go).
func (s *Store) runTx(ctx context.Context, fn func(ctx context.Context, tx *txConn) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx := &txConn{conn: conn.Conn(), beginStmt: s.opts.beginSQL(), serializable: s.opts.Serializable}
	err = s.seen(fn(ctx, tx))
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
		return 0, fmt.Errorf("ensure task %s/%s: %w", app, task, err)
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
		return 0, false, fmt.Errorf("find task %s/%s: %w", app, task, err)
	}
	return id, true, nil
}

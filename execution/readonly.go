package execution

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A primary that a failover demoted, or that a managed service keeps up read-only after moving
// the writes elsewhere, answers every write with SQLSTATE 25006 on connections that are
// otherwise healthy: a pool would hand them out again and again, and never dial the new primary
// that a multi-host URL (target_session_attrs=read-write) would find. So every statement the
// Store sends goes through roPool, and an answer of 25006 resets the pool: its idle connections
// are closed at once, those in use when they are released (pgxpool.Pool.Reset, which is meant
// for a server state change), and the next statement dials anew.

// ErrDatabaseReadOnly is wrapped by the error of a statement that a read-only server refused
// (SQLSTATE 25006: a standby, or a primary demoted by a failover), and of a connection refused
// because its server is read-only (target_session_attrs=read-write or primary).
var ErrDatabaseReadOnly = errors.New("taskling: the database server is read-only (a standby, or a primary demoted by a failover)")

// sqlStateReadOnly is read_only_sql_transaction.
const sqlStateReadOnly = "25006"

// IsReadOnly reports whether err means the server is read-only: a statement refused with
// SQLSTATE 25006 (nothing it asked for was done), or a connection refused for that reason.
func IsReadOnly(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	return errors.Is(err, ErrDatabaseReadOnly) || errors.As(err, &pgErr) && pgErr.Code == sqlStateReadOnly ||
		errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection)
}

// IsUnavailable reports whether err means the database cannot serve writes for now: a failed
// connection (IsConnectionError) or a read-only server. Work that may be retried on another
// connection (a release, a waiter's next attempt) is retried.
func IsUnavailable(err error) bool { return IsConnectionError(err) || IsReadOnly(err) }

// readOnlyRetries bounds the token transactions retried after a read-only server refused them:
// the first retry dials a new connection, which target_session_attrs sends to a writable server
// or refuses at once.
const readOnlyRetries = 2

// refusedReadOnly reports whether a statement was refused by a read-only server (not a
// connection: that one found no writable server to retry on).
func refusedReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlStateReadOnly
}

// roPool is the pool as the Store uses it: the same methods, each watching its errors for a
// read-only server (see seen).
type roPool struct {
	*pgxpool.Pool
	s *Store
}

// seen returns err wrapping ErrDatabaseReadOnly when it means a read-only server, after resetting
// the pool if a statement was refused (a connection refused for that reason was never pooled).
func (s *Store) seen(err error) error {
	if err == nil || !IsReadOnly(err) || errors.Is(err, ErrDatabaseReadOnly) {
		return err
	}
	if refusedReadOnly(err) {
		s.pool.Reset()
		s.readOnlyResets.Add(1)
		if s.opts.OnReadOnly != nil {
			s.opts.OnReadOnly()
		}
	}
	return fmt.Errorf("%w: %w", ErrDatabaseReadOnly, err)
}

func (p roPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ct, err := p.Pool.Exec(ctx, sql, args...)
	return ct, p.s.seen(err)
}

func (p roPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := p.Pool.Query(ctx, sql, args...)
	return roRows{rows, p.s}, p.s.seen(err)
}

func (p roPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return roRow{p.Pool.QueryRow(ctx, sql, args...), p.s}
}

func (p roPool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return roBatch{p.Pool.SendBatch(ctx, b), p.s}
}

func (p roPool) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, p.s.seen(err)
	}
	return roTx{tx, p.s}, nil
}

func (p roPool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := p.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, p.s.seen(err)
	}
	return roTx{tx, p.s}, nil
}

func (p roPool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c, err := p.Pool.Acquire(ctx)
	return c, p.s.seen(err)
}

type roRow struct {
	pgx.Row
	s *Store
}

func (r roRow) Scan(dest ...any) error { return r.s.seen(r.Row.Scan(dest...)) }

type roRows struct {
	pgx.Rows
	s *Store
}

func (r roRows) Err() error { return r.s.seen(r.Rows.Err()) }

type roBatch struct {
	pgx.BatchResults
	s *Store
}

func (b roBatch) Exec() (pgconn.CommandTag, error) {
	ct, err := b.BatchResults.Exec()
	return ct, b.s.seen(err)
}

func (b roBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	return roRows{rows, b.s}, b.s.seen(err)
}

func (b roBatch) QueryRow() pgx.Row { return roRow{b.BatchResults.QueryRow(), b.s} }

func (b roBatch) Close() error { return b.s.seen(b.BatchResults.Close()) }

type roTx struct {
	pgx.Tx
	s *Store
}

func (t roTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ct, err := t.Tx.Exec(ctx, sql, args...)
	return ct, t.s.seen(err)
}

func (t roTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	return roRows{rows, t.s}, t.s.seen(err)
}

func (t roTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return roRow{t.Tx.QueryRow(ctx, sql, args...), t.s}
}

func (t roTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return roBatch{t.Tx.SendBatch(ctx, b), t.s}
}

func (t roTx) Commit(ctx context.Context) error { return t.s.seen(t.Tx.Commit(ctx)) }

package bench

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// StatementCounter counts the statements sent through the connections it traces: set it as the
// pool's ConnConfig.Tracer before the pool connects. Statements of batches count one each.
type StatementCounter struct{ n atomic.Int64 }

// Count is the number of statements sent so far.
func (c *StatementCounter) Count() int64 { return c.n.Load() }

func (c *StatementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *StatementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *StatementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *StatementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *StatementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// WALPosition is the server's current WAL position in bytes: the difference of two is the WAL
// written in between, by the whole cluster.
func WALPosition(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var lsn int64
	err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn)
	return lsn, err
}

// Measured runs scenario and adds the statements counter saw and the WAL written meanwhile to its
// result.
func Measured(ctx context.Context, pool *pgxpool.Pool, counter *StatementCounter, scenario func() (Result, error)) (Result, error) {
	wal0, err := WALPosition(ctx, pool)
	if err != nil {
		return Result{}, err
	}
	n0 := int64(0)
	if counter != nil {
		n0 = counter.Count()
	}
	res, err := scenario()
	if err != nil {
		return res, err
	}
	wal1, err := WALPosition(ctx, pool)
	if err != nil {
		return res, err
	}
	res.WALBytes = wal1 - wal0
	if counter != nil {
		res.Statements += counter.Count() - n0
	}
	return res, nil
}

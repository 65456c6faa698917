package execution

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pipeline is a READ COMMITTED transaction of a feature store whose statements go in as few
// round trips as its logic allows: BEGIN goes with the first batch, COMMIT with the last. A
// transaction that holds a lock from one round trip to its end (the creation of blocks that
// continue from the last one) holds it for one round trip, not three.
type Pipeline struct {
	conn  *pgx.Conn
	batch *pgx.Batch
	open  bool // BEGIN was sent, and neither COMMIT nor ROLLBACK
}

// Queue adds a statement to the next round trip; read its result through the returned query's
// Query, QueryRow or Exec callbacks, which run when the round trip is sent.
func (p *Pipeline) Queue(sql string, args ...any) *pgx.QueuedQuery {
	return p.batch.Queue(sql, args...)
}

// Send sends the queued statements in one round trip and runs their callbacks.
func (p *Pipeline) Send(ctx context.Context) error {
	if p.batch.Len() == 0 {
		return nil
	}
	b := p.batch
	p.batch = &pgx.Batch{}
	p.open = true
	return p.conn.SendBatch(ctx, b).Close()
}

// CopyFrom sends what is queued, then copies rows into table inside the transaction.
func (p *Pipeline) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if err := p.Send(ctx); err != nil {
		return 0, err
	}
	return p.conn.CopyFrom(ctx, table, columns, rows)
}

// PipelineTx runs fn in a Pipeline on a connection of its own, and commits with the statements
// fn left queued when it returns nil. If fn or the commit fails with the transaction open, it is
// rolled back (or the connection closed, and the pool discards it).
func (s *Store) PipelineTx(ctx context.Context, fn func(ctx context.Context, p *Pipeline) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	p := &Pipeline{conn: conn.Conn(), batch: &pgx.Batch{}}
	p.batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	err = fn(ctx, p)
	if err == nil {
		p.batch.Queue("COMMIT")
		if err = p.Send(ctx); err == nil {
			p.open = false
			return nil
		}
	}
	err = s.seen(err)
	if p.open {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := p.conn.Exec(rctx, "ROLLBACK"); rerr != nil {
			_ = p.conn.Close(rctx)
		}
	}
	return err
}

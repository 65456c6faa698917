package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Raw runs the floor on one task row: per cycle, an acquire and a release transaction, each
// BEGIN; UPDATE (take the row lock); SELECT (read the tokens); UPDATE (write them); COMMIT,
// statement by statement, with serialization failures retried. No local queueing: every goroutine
// contends on the row.
func Raw(ctx context.Context, pool *pgxpool.Pool, iso pgx.TxIsoLevel, goroutines int, d time.Duration) (Result, error) {
	ids, err := floorRows(ctx, pool, 1)
	if err != nil {
		return Result{}, err
	}
	var retries atomic.Int64
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, _ int) error {
		if err := floorTx(ctx, pool, iso, ids[0], &retries, nil); err != nil {
			return err
		}
		return floorTx(ctx, pool, iso, ids[0], &retries, nil)
	})
	res.Retries = retries.Load()
	return res, err
}

// RawTasks runs the floor over independent task rows, one goroutine per row, doing what a real
// cycle must at least do: the write-read-write of the task row in both transactions, plus one
// execution INSERT in the acquire and its completion UPDATE in the release (into a table with a
// primary key only).
func RawTasks(ctx context.Context, pool *pgxpool.Pool, iso pgx.TxIsoLevel, goroutines int, d time.Duration) (Result, error) {
	ids, err := floorRows(ctx, pool, goroutines)
	if err != nil {
		return Result{}, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_execution (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id bigint NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at timestamptz)`); err != nil {
		return Result{}, err
	}
	var retries atomic.Int64
	res, err := loop(ctx, goroutines, d, func(ctx context.Context, g int) error {
		var execID int64
		err := floorTx(ctx, pool, iso, ids[g], &retries, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `INSERT INTO bench_execution (task_id) VALUES ($1) RETURNING id`, ids[g]).Scan(&execID)
		})
		if err != nil {
			return err
		}
		return floorTx(ctx, pool, iso, ids[g], &retries, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE bench_execution SET completed_at = clock_timestamp() WHERE id = $1`, execID)
			return err
		})
	})
	res.Retries = retries.Load()
	return res, err
}

// floorRows inserts n task rows for the floor.
func floorRows(ctx context.Context, pool *pgxpool.Pool, n int) ([]int64, error) {
	rows, err := pool.Query(ctx, `INSERT INTO taskling.task_definition (application_name, task_name)
SELECT 'bench', 'raw-' || g || '-' || gen_random_uuid() FROM generate_series(1, $1) g RETURNING id`, n)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("bench: floor rows: %w", err)
	}
	return ids, nil
}

// floorTx is one raw write-read-write transaction on a task row, with extra (if not nil) run
// before COMMIT, retried on serialization failures.
func floorTx(ctx context.Context, pool *pgxpool.Pool, iso pgx.TxIsoLevel, taskID int64, retries *atomic.Int64, extra func(pgx.Tx) error) error {
	for {
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE taskling.task_definition SET fence = fence WHERE id = $1`, taskID); err != nil {
				return err
			}
			var tokens string
			var fence int64
			if err := tx.QueryRow(ctx, `SELECT tokens, fence FROM taskling.task_definition WHERE id = $1`, taskID).Scan(&tokens, &fence); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE taskling.task_definition SET tokens = $2, fence = $3 WHERE id = $1`, taskID, tokens, fence+1); err != nil {
				return err
			}
			if extra != nil {
				return extra(tx)
			}
			return nil
		})
		if err == nil || !isSerializationFailure(err) {
			return err
		}
		retries.Add(1)
	}
}

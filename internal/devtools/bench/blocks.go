package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
)

// The block scenarios measure what a batch job pays for durable blocks: blocks taken, started and
// completed per second, and list item statuses committed per second in each commit mode, each
// against the same rows written directly through pgx.

// BlockCycles runs goroutines loops from start for d, each: start an execution of app/task, take
// per new numeric blocks of size 100 continuing from the last one, start and complete each, then
// complete the execution. It returns the blocks completed.
func BlockCycles(ctx context.Context, client *taskling.Client, app, task string, goroutines, per int, start time.Time, d time.Duration) (int64, error) {
	end := start.Add(d)
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	time.Sleep(time.Until(start))
	for range goroutines {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := blockCycle(ctx, client, app, task, per, &done); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return done.Load(), <-errs
}

func blockCycle(ctx context.Context, client *taskling.Client, app, task string, per int, done *atomic.Int64) error {
	e, err := client.StartExecution(ctx, app, task, &taskling.StartOptions{WaitForSlot: true})
	if err != nil {
		return err
	}
	blocks, err := e.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 1 << 60, MaxSize: 100},
		&taskling.BlockOptions{MaxBlocks: per, ContinueFromLast: true})
	if err != nil {
		return errors.Join(err, e.Complete(ctx))
	}
	for _, b := range blocks {
		if err := b.Start(ctx); err != nil {
			return errors.Join(err, e.Complete(ctx))
		}
		if err := b.Complete(ctx, 100); err != nil {
			return errors.Join(err, e.Complete(ctx))
		}
		done.Add(1)
	}
	return e.Complete(ctx)
}

// rawTaskSQL makes the raw floor's task row (blocks need one).
const rawTaskSQL = `
WITH ins AS (
    INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('bench', 'raw-blocks')
    ON CONFLICT (application_name, task_name) DO NOTHING RETURNING id
)
SELECT id FROM ins UNION ALL
SELECT id FROM taskling.task_definition WHERE application_name = 'bench' AND task_name = 'raw-blocks'
LIMIT 1`

// RawBlockCycles writes what BlockCycles' blocks write, directly: per loop, one transaction that
// takes the next range start from a sequence and inserts per blocks with their first attempts;
// then per block one round trip that marks the block and its attempt started and one that marks
// them completed. It returns the blocks completed.
func RawBlockCycles(ctx context.Context, pool *pgxpool.Pool, goroutines, per int, start time.Time, d time.Duration) (int64, error) {
	var task int64
	if err := pool.QueryRow(ctx, rawTaskSQL).Scan(&task); err != nil {
		return 0, err
	}
	// Processes start at once: CREATE SEQUENCE IF NOT EXISTS alone races on the catalog.
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7424)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE SEQUENCE IF NOT EXISTS bench_raw_blocks`)
		return err
	}); err != nil {
		return 0, err
	}
	end := start.Add(d)
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	time.Sleep(time.Until(start))
	for range goroutines {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := rawBlockCycle(ctx, pool, task, per, &done); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return done.Load(), <-errs
}

func rawBlockCycle(ctx context.Context, pool *pgxpool.Pool, task int64, per int, done *atomic.Int64) error {
	var ids []int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var first int64
		if err := tx.QueryRow(ctx, `SELECT nextval('bench_raw_blocks') * $1`, per).Scan(&first); err != nil {
			return err
		}
		from, to := make([]int64, per), make([]int64, per)
		for i := range per {
			from[i] = (first+int64(i))*100 + 1
			to[i] = from[i] + 99
		}
		rows, err := tx.Query(ctx, `INSERT INTO taskling.block (task_id, kind, execution_id, from_number, to_number)
            SELECT $1, 1, 0, f, t FROM unnest($2::bigint[], $3::bigint[]) AS u(f, t) RETURNING id`, task, from, to)
		if err != nil {
			return err
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO taskling.block_attempt (block_id, attempt, execution_id) SELECT id, 1, 0 FROM unnest($1::bigint[]) AS id`, ids)
		return err
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		for _, status := range []int16{2, 3} {
			b := &pgx.Batch{}
			b.Queue(`UPDATE taskling.block SET status = $2 WHERE id = $1`, id, status)
			b.Queue(`UPDATE taskling.block_attempt SET status = $2::smallint,
                started_at = CASE WHEN $2::smallint = 2 THEN clock_timestamp() ELSE started_at END,
                ended_at = CASE WHEN $2::smallint = 3 THEN clock_timestamp() END WHERE block_id = $1 AND attempt = 1`, id, status)
			if err := pool.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
		}
		done.Add(1)
	}
	return nil
}

// ItemCommits completes n list items (blocks of blockSize) of one execution of app/task in mode
// and returns the items committed per second, from the first item to the last block's Complete.
func ItemCommits(ctx context.Context, client *taskling.Client, app, task string, mode taskling.CommitMode, n, blockSize int) (float64, error) {
	e, err := client.StartExecution(ctx, app, task, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = e.Complete(ctx) }()
	values := make([]any, n)
	for i := range values {
		values[i] = i
	}
	lists, err := e.ListBlocks(ctx, taskling.ListBlocksRequest{Items: values, MaxBlockSize: blockSize, Commit: mode, BatchSize: 100}, nil)
	if err != nil {
		return 0, err
	}
	all := make([][]*taskling.ListItem, len(lists))
	for i, l := range lists {
		if all[i], err = l.Items(ctx, taskling.ItemPending); err != nil {
			return 0, err
		}
	}
	began := time.Now()
	for i, l := range lists {
		for _, it := range all[i] {
			if err := l.ItemCompleted(ctx, it); err != nil {
				return 0, err
			}
		}
		if err := l.Complete(ctx); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// RawItemCommits writes the same statuses as ItemCommits directly: list items of blocks made by
// an execution of app/task (through the library) are marked completed one statement per item
// (CommitEachItem), per 100 (CommitPeriodically) or per block (CommitAtEnd), each block then
// marked completed. It returns items per second.
func RawItemCommits(ctx context.Context, client *taskling.Client, pool *pgxpool.Pool, app, task string, mode taskling.CommitMode, n, blockSize int) (float64, error) {
	e, err := client.StartExecution(ctx, app, task, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = e.Complete(ctx) }()
	values := make([]any, n)
	for i := range values {
		values[i] = i
	}
	lists, err := e.ListBlocks(ctx, taskling.ListBlocksRequest{Items: values, MaxBlockSize: blockSize}, nil)
	if err != nil {
		return 0, err
	}
	batch := map[taskling.CommitMode]int{taskling.CommitEachItem: 1, taskling.CommitPeriodically: 100, taskling.CommitAtEnd: blockSize}[mode]
	if batch == 0 {
		return 0, fmt.Errorf("unknown commit mode %d", mode)
	}
	began := time.Now()
	for _, l := range lists {
		for from := 1; from <= l.ItemCount; from += batch {
			ns := make([]int32, 0, batch)
			for n := from; n < from+batch && n <= l.ItemCount; n++ {
				ns = append(ns, int32(n))
			}
			if _, err := pool.Exec(ctx, `UPDATE taskling.list_item SET status = 2, updated_at = clock_timestamp()
                WHERE block_id = $1 AND n = ANY($2)`, l.ID, ns); err != nil {
				return 0, err
			}
		}
		if _, err := pool.Exec(ctx, `UPDATE taskling.block SET status = 3 WHERE id = $1`, l.ID); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

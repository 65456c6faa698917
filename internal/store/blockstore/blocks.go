// Package blockstore is the storage of blocks (migration 0008): an execution's work in durable
// units. Taking a block — a new one, or
// one to run again — writes its next attempt: the block row's latest attempt moves by
// compare-and-set (FOR UPDATE SKIP LOCKED, then attempts = the value read), and block_attempt's
// key (block, attempt) refuses a second taker, so two executions never hold one block. A block
// whose latest attempt did not end is live while its execution runs, judged exactly like a slot
// (taskling.block_live): once that execution is dead, reclaimed or ended, the block is dead.
package blockstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype/zeronull"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/storedjson"
	"github.com/taskling-go/taskling/tasklingtype"
)

// ErrBlockLost: the block's attempt is no longer the caller's (another execution took the block
// after the caller's was judged dead), or it already ended.
var ErrBlockLost = errors.New("block attempt is not the latest, or has ended")

// RetryRule takes failed or dead blocks again: those whose latest attempt's execution started
// within Within, at most Limit times each (Limit + 1 attempts in all).
type RetryRule struct {
	Within time.Duration
	Limit  int
}

// TakeBlocksRequest is one request for blocks of one kind, served in one transaction: forced
// blocks, then dead ones, then failed ones, then new ones, at most Max in all (0: no cap).
type TakeBlocksRequest struct {
	TaskID, ExecutionID int64
	Kind                int16
	Max                 int
	Dead, Failed        *RetryRule
	// Reference, when set, takes only the blocks attempted by executions with this reference
	// value: those not completed, or all of them with ReferenceAll. Nothing else is taken.
	Reference    *string
	ReferenceAll bool
	// New makes the new list or object blocks (all are created, whatever Max: their items exist
	// only in this request); Ranges, the new numeric or date ones. Neither: no new blocks.
	New    func() (NewBlocks, error)
	Ranges *Ranges
	// Continue: the new ranges continue from the end of the task's last block of the kind, so
	// their creation is serialized per task.
	Continue bool
}

// retryLimit is what the blocks taken record as their retry limit.
func (r TakeBlocksRequest) retryLimit() int {
	n := 0
	for _, rule := range []*RetryRule{r.Dead, r.Failed} {
		if rule != nil {
			n = max(n, rule.Limit)
		}
	}
	return n
}

// Ranges are new numeric blocks (MaxSize > 0: From to To, at most MaxSize numbers each) or date
// blocks ([FromDate, ToDate), at most MaxSpan each), cut by the database
// (taskling.numeric_block_ranges, taskling.date_block_ranges) in the statement that inserts them.
type Ranges struct {
	From, To, MaxSize int64
	FromDate, ToDate  time.Time
	MaxSpan           time.Duration
}

// NewBlocks are list or object blocks to create, all of the request's kind.
type NewBlocks struct {
	Values [][]byte   // object values
	Header []byte     // list blocks' header
	Items  [][][]byte // list blocks' items, one slice per block
}

func (n NewBlocks) count() int {
	return max(len(n.Values), len(n.Items))
}

// BlockRow is a block as taken or listed.
type BlockRow struct {
	ID          int64      `db:"id"`
	TaskID      int64      `db:"task_id"`
	Kind        int16      `db:"kind"`
	FromNumber  *int64     `db:"from_number"`
	ToNumber    *int64     `db:"to_number"`
	FromDate    *time.Time `db:"from_date"`
	ToDate      *time.Time `db:"to_date"`
	Value       []byte     `db:"value"`
	ItemCount   int        `db:"item_count"`
	CreatedAt   time.Time  `db:"created_at"`
	Attempt     int        `db:"attempts"`
	Status      int16      `db:"status"`
	ExecutionID int64      `db:"execution_id"`
	// Forced: taken because an operator forced it. ItemsDone: a list block's items already
	// completed or discarded when it was taken.
	Forced    bool  `db:"forced"`
	ItemsDone int64 `db:"items_done"`
	// Retaken: the previous attempt was the same execution's (its progress already counts it).
	Retaken bool `db:"retaken"`
}

// The claims take, for execution $4, up to $3 blocks of task $1 and kind $2, oldest first, each
// with its next attempt ($5: forced; $6: the request's retry limit). A block is a candidate when
// it is not live (taskling.block_live, judged in a subquery on b, so that the re-check of a row
// another claim changed meanwhile — FOR UPDATE in READ COMMITTED reads its newest version —
// judges the new owner and skips the row, instead of locking it and finding its attempt count
// changed). The attempt count read must still be the row's when it is written (a compare-and-set
// on top of the row lock), and (block, attempt) is block_attempt's key: two claims never take one
// attempt. A forced block taken another way (dead, failed) has run again too: its force is marked
// taken. retaken: counted already by this execution, unless it completed it before (forced again:
// new work).

// claimForcedSQL takes the blocks an operator forced. Almost every take finds none: the
// uncorrelated EXISTS is decided once, before any block is read, whatever plan the rest gets (a
// plan that walked the task's unfinished blocks judging each one live took ~18 ms at 800 of them).
const claimForcedSQL = `
WITH cand AS (
    SELECT b.id, b.attempts, b.execution_id AS prev, b.status AS prev_status
    FROM taskling.block b
    WHERE EXISTS (SELECT 1 FROM taskling.forced_block f WHERE f.task_id = $1 AND f.taken_at IS NULL)
      AND b.task_id = $1 AND b.kind = $2 AND NOT taskling.block_live(b)
      AND b.id IN (SELECT f.block_id FROM taskling.forced_block f WHERE f.task_id = $1 AND f.taken_at IS NULL)
    ORDER BY b.created_at, b.id
    LIMIT $3
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE taskling.block b SET attempts = b.attempts + 1, status = taskling.block_status('not_started'), execution_id = $4, retry_limit = $6
    FROM cand WHERE b.id = cand.id AND b.attempts = cand.attempts
    RETURNING b.*
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id, forced)
    SELECT id, attempts, $4, $5 FROM claimed
), forced AS (
    UPDATE taskling.forced_block f SET taken_at = clock_timestamp(), taken_by = $4
    FROM claimed WHERE f.block_id = claimed.id AND f.taken_at IS NULL
)
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, $5 AS forced,
    cand.prev = $4 AND cand.prev_status <> taskling.block_status('completed') AS retaken,
    (SELECT count(*) FROM taskling.list_item i WHERE i.block_id = b.id
        AND i.status IN (taskling.item_status('completed'), taskling.item_status('discarded'))) AS items_done
FROM claimed b JOIN cand ON cand.id = b.id
ORDER BY b.created_at, b.id`

// claimDeadSQL takes the dead blocks of status $9 (not started, or started: TakeBlocks takes them
// in that order, each oldest first by block_pickup_idx) tried at most $7 times, whose latest
// execution started within $8.
const claimDeadSQL = `
WITH cand AS (
    SELECT b.id, b.attempts, b.execution_id AS prev, b.status AS prev_status
    FROM taskling.block b
    WHERE b.task_id = $1 AND b.kind = $2 AND NOT taskling.block_live(b)
      AND b.status = $9 AND b.attempts <= $7 AND taskling.block_owner_started_at(b) >= clock_timestamp() - $8::interval
    ORDER BY b.created_at, b.id
    LIMIT $3
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE taskling.block b SET attempts = b.attempts + 1, status = taskling.block_status('not_started'), execution_id = $4, retry_limit = $6
    FROM cand WHERE b.id = cand.id AND b.attempts = cand.attempts
    RETURNING b.*
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id, forced)
    SELECT id, attempts, $4, $5 FROM claimed
), forced AS (
    UPDATE taskling.forced_block f SET taken_at = clock_timestamp(), taken_by = $4
    FROM claimed WHERE f.block_id = claimed.id AND f.taken_at IS NULL
)
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, $5 AS forced,
    cand.prev = $4 AND cand.prev_status <> taskling.block_status('completed') AS retaken,
    (SELECT count(*) FROM taskling.list_item i WHERE i.block_id = b.id
        AND i.status IN (taskling.item_status('completed'), taskling.item_status('discarded'))) AS items_done
FROM claimed b JOIN cand ON cand.id = b.id
ORDER BY b.created_at, b.id`

// claimFailedSQL takes the failed blocks tried at most $7 times, whose latest execution started
// within $8.
const claimFailedSQL = `
WITH cand AS (
    SELECT b.id, b.attempts, b.execution_id AS prev, b.status AS prev_status
    FROM taskling.block b
    WHERE b.task_id = $1 AND b.kind = $2 AND NOT taskling.block_live(b)
      AND b.status = taskling.block_status('failed') AND b.attempts <= $7
      AND taskling.block_owner_started_at(b) >= clock_timestamp() - $8::interval
    ORDER BY b.created_at, b.id
    LIMIT $3
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE taskling.block b SET attempts = b.attempts + 1, status = taskling.block_status('not_started'), execution_id = $4, retry_limit = $6
    FROM cand WHERE b.id = cand.id AND b.attempts = cand.attempts
    RETURNING b.*
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id, forced)
    SELECT id, attempts, $4, $5 FROM claimed
), forced AS (
    UPDATE taskling.forced_block f SET taken_at = clock_timestamp(), taken_by = $4
    FROM claimed WHERE f.block_id = claimed.id AND f.taken_at IS NULL
)
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, $5 AS forced,
    cand.prev = $4 AND cand.prev_status <> taskling.block_status('completed') AS retaken,
    (SELECT count(*) FROM taskling.list_item i WHERE i.block_id = b.id
        AND i.status IN (taskling.item_status('completed'), taskling.item_status('discarded'))) AS items_done
FROM claimed b JOIN cand ON cand.id = b.id
ORDER BY b.created_at, b.id`

// claimRefSQL takes the blocks an execution with reference value $7 attempted (only those not
// completed, unless $8).
const claimRefSQL = `
WITH cand AS (
    SELECT b.id, b.attempts, b.execution_id AS prev, b.status AS prev_status
    FROM taskling.block b
    WHERE b.task_id = $1 AND b.kind = $2 AND NOT taskling.block_live(b)
      AND ($8 OR b.status <> taskling.block_status('completed'))
      AND EXISTS (SELECT 1 FROM taskling.block_attempt a JOIN taskling.task_execution r ON r.id = a.execution_id
                  WHERE a.block_id = b.id AND r.reference_value = $7)
    ORDER BY b.created_at, b.id
    LIMIT $3
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE taskling.block b SET attempts = b.attempts + 1, status = taskling.block_status('not_started'), execution_id = $4, retry_limit = $6
    FROM cand WHERE b.id = cand.id AND b.attempts = cand.attempts
    RETURNING b.*
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id, forced)
    SELECT id, attempts, $4, $5 FROM claimed
), forced AS (
    UPDATE taskling.forced_block f SET taken_at = clock_timestamp(), taken_by = $4
    FROM claimed WHERE f.block_id = claimed.id AND f.taken_at IS NULL
)
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, $5 AS forced,
    cand.prev = $4 AND cand.prev_status <> taskling.block_status('completed') AS retaken,
    (SELECT count(*) FROM taskling.list_item i WHERE i.block_id = b.id
        AND i.status IN (taskling.item_status('completed'), taskling.item_status('discarded'))) AS items_done
FROM claimed b JOIN cand ON cand.id = b.id
ORDER BY b.created_at, b.id`

// genericPlansSQL makes the rest of a transaction use generic plans (a take's, an item update's).
const genericPlansSQL = `SET LOCAL plan_cache_mode = force_generic_plan`

// blockLockClass is the first key of the advisory lock that serializes the creation of a task's
// continued ranges (the second is the task id): "tkbl".
const blockLockClass = 0x746b626c

// insertBlocksSQL creates the new list or object blocks of execution $2 (first attempt) for task
// $1, kind $3.
const insertBlocksSQL = `
WITH nb AS (
    INSERT INTO taskling.block (task_id, kind, execution_id, value, item_count, retry_limit)
    SELECT $1, $3, $2, v, coalesce(ic, 0), $6
    FROM unnest($4::jsonb[], $5::integer[]) WITH ORDINALITY AS u(v, ic, ord)
    ORDER BY ord
    RETURNING *
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id) SELECT id, 1, $2 FROM nb
), p AS (
    UPDATE taskling.task_execution SET items_done = coalesce(items_done, 0) + $8,
        items_total = coalesce(items_total, 0) + $7 + (SELECT coalesce(sum(taskling.block_units(b)), 0) FROM nb b)
    WHERE id = $2
)
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, false AS forced, 0::bigint AS items_done
FROM nb b ORDER BY b.id`

// insertRangesSQL creates numeric (kind 1: $3 to $4, at most $5 numbers each) or date (kind 2:
// $3 to $4, at most $5 each) blocks of execution $2 (first attempt) for task $1, at most $6
// (negative: no cap), after the end of the task's last block of the kind when $7 (read here, so
// that the block lock taken before it is held for no round trip; by block_numeric_end_idx or
// block_date_end_idx). A range that exists already is skipped. One statement per kind: with both
// in one, gated by the kind, PostgreSQL planned it afresh at every call (~1.2 ms, under the lock).
// The ranges function is inlined into the plan: called WITH ORDINALITY, or with a sub-select for
// an argument, it was not, and its body was parsed and planned again at every take (~0.5 ms of
// the statement's 2 ms). Hence the last end read in a subquery of its own (OFFSET 0 keeps it from
// being copied into each use of the argument) and the order by the ranges' starts.
func insertRangesSQL(kind int16) string {
	if kind == codes.BlockNumeric {
		return insertNumericRangesSQL
	}
	return insertDateRangesSQL
}

const insertNumericRangesSQL = `
WITH nb AS (
    INSERT INTO taskling.block (task_id, kind, execution_id, from_number, to_number, retry_limit)
    SELECT $1, 1, $2, r.from_number, r.to_number, $8
    FROM (SELECT CASE WHEN $7 THEN (SELECT max(b.to_number) FROM taskling.block b WHERE b.task_id = $1 AND b.kind = 1) END AS last
          OFFSET 0) l,
        taskling.numeric_block_ranges(l.last, $3, $4, $5, $6) AS r
    ORDER BY r.from_number
    ON CONFLICT DO NOTHING
    RETURNING *
` + insertedRangesSQL

const insertDateRangesSQL = `
WITH nb AS (
    INSERT INTO taskling.block (task_id, kind, execution_id, from_date, to_date, retry_limit)
    SELECT $1, 2, $2, r.from_date, r.to_date, $8
    FROM (SELECT CASE WHEN $7 THEN (SELECT max(b.to_date) FROM taskling.block b WHERE b.task_id = $1 AND b.kind = 2) END AS last
          OFFSET 0) l,
        taskling.date_block_ranges(l.last, $3, $4, $5, $6) AS r
    ORDER BY r.from_date
    ON CONFLICT DO NOTHING
    RETURNING *
` + insertedRangesSQL

// insertedRangesSQL ends insertNumericRangesSQL and insertDateRangesSQL: the blocks' first
// attempts, their execution's progress ($9 total and $10 done added with them), the rows.
const insertedRangesSQL = `
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id) SELECT id, 1, $2 FROM nb
), p AS (
    UPDATE taskling.task_execution SET items_done = coalesce(items_done, 0) + $10,
        items_total = coalesce(items_total, 0) + $9 + (SELECT coalesce(sum(taskling.block_units(b)), 0) FROM nb b)
    WHERE id = $2
)
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, false AS forced, 0::bigint AS items_done
FROM nb b ORDER BY b.id`

// Units is a block's weight in its execution's progress: its numbers, its items, or one
// (taskling.block_units in SQL).
func (b BlockRow) Units() int64 {
	switch b.Kind {
	case codes.BlockNumeric:
		if b.FromNumber == nil || b.ToNumber == nil { // refused by the table's checks
			return 1
		}
		return *b.ToNumber - *b.FromNumber + 1
	case codes.BlockList:
		return int64(b.ItemCount)
	}
	return 1
}

const addProgressSQL = `UPDATE taskling.task_execution
SET items_done = coalesce(items_done, 0) + $2, items_total = coalesce(items_total, 0) + $3 WHERE id = $1`

// TakeBlocks serves req in one READ COMMITTED transaction and returns the blocks taken, in the
// order forced, dead (never started, then started), failed, new (oldest first within each), and
// adds them to the execution's progress. A serialization failure or deadlock is retried.
func (s *Store) TakeBlocks(ctx context.Context, req TakeBlocksRequest) ([]BlockRow, error) {
	for attempt := 0; ; attempt++ {
		var out []BlockRow
		err := s.proto.PipelineTx(ctx, func(ctx context.Context, p *execution.Pipeline) error {
			out = out[:0]
			return s.takeBlocks(ctx, p, req, &out)
		})
		if err == nil {
			return out, nil
		}
		if pgErr := (*pgconn.PgError)(nil); req.Ranges != nil && errors.As(err, &pgErr) && pgErr.Code == "42883" {
			// Undefined function: a binary of this release on a database not yet migrated.
			return nil, fmt.Errorf("take blocks of task %d: numeric and date blocks need migration 0024 (run migrations.Up): %w", req.TaskID, err)
		}
		if !execution.IsRetryable(err) || attempt >= 5 {
			return nil, fmt.Errorf("take blocks of task %d: %w", req.TaskID, err)
		}
	}
}

// takeBlocks is TakeBlocks' transaction, in as few round trips as the request allows: with no
// dead or failed blocks to take, BEGIN and the forced blocks' claim go in the first, and the new
// blocks' insert with COMMIT in the second — after the task's block lock for ranges that continue
// from the last one, so that the lock is held while the server inserts and commits, for no round
// trip. The blocks taken join *out as their statements are sent (the last ones with COMMIT).
func (s *Store) takeBlocks(ctx context.Context, p *execution.Pipeline, req TakeBlocksRequest, out *[]BlockRow) error {
	room := func() int {
		if req.Max <= 0 {
			return math.MaxInt32
		}
		return req.Max - len(*out)
	}
	// claim queues a claim of up to room() blocks; its rows join out when the round trip is sent.
	claim := func(sql string, forced bool, args ...any) {
		if room() <= 0 {
			return
		}
		all := append([]any{req.TaskID, req.Kind, room(), req.ExecutionID, forced, req.retryLimit()}, args...)
		p.Queue(sql, all...).Query(func(rows pgx.Rows) error {
			var claimed []BlockRow
			if err := pgxscan.ScanAll(&claimed, rows); err != nil {
				return err
			}
			*out = append(*out, claimed...)
			return nil
		})
	}
	if req.Reference != nil {
		claim(claimRefSQL, false, *req.Reference, req.ReferenceAll)
		if err := p.Send(ctx); err != nil {
			return err
		}
		queueProgress(p, req.ExecutionID, *out)
		return nil
	}
	if req.Ranges != nil && req.Dead == nil && req.Failed == nil {
		// The forced blocks' claim and the ranges' insert were planned afresh at every take
		// (~0.3 ms together); their generic plans serve every take alike (the forced claim's
		// EXISTS is decided before any block is read, whatever the plan).
		p.Queue(genericPlansSQL)
	}
	claim(claimForcedSQL, true)
	if err := p.Send(ctx); err != nil {
		return err
	}
	if r := req.Dead; r != nil {
		// A run that dies on one block (a panic every time) leaves dead the blocks it had
		// taken but not reached yet: they come first, so that the poison one cannot hold
		// them back until their retries are spent.
		for _, status := range []int16{codes.BlockNotStarted, codes.BlockStarted} {
			claim(claimDeadSQL, false, r.Limit, r.Within, status)
			if err := p.Send(ctx); err != nil {
				return err
			}
		}
	}
	if r := req.Failed; r != nil {
		claim(claimFailedSQL, false, r.Limit, r.Within)
		if err := p.Send(ctx); err != nil {
			return err
		}
	}
	switch {
	case req.Ranges != nil && room() > 0:
		queueRanges(p, req, room(), out)
		return nil
	case req.New != nil:
		counted, err := s.createBlocks(ctx, p, req, out)
		if err != nil || counted {
			return err
		}
	}
	queueProgress(p, req.ExecutionID, *out)
	return nil
}

// queueRanges queues the creation of req's new numeric or date blocks, at most room of them
// (math.MaxInt32: no cap), with the addition of them and of the blocks claimed before them to the
// execution's progress; ranges that continue from the last one take the task's block lock first.
// The created blocks join *out when the statement is sent.
func queueRanges(p *execution.Pipeline, req TakeBlocksRequest, room int, out *[]BlockRow) {
	if room == math.MaxInt32 {
		room = -1
	}
	if req.Continue {
		p.Queue(`SELECT pg_advisory_xact_lock($1, $2::integer)`, int32(blockLockClass), int32(req.TaskID))
	}
	r := req.Ranges
	from, to, size := any(r.From), any(r.To), any(r.MaxSize)
	if req.Kind == codes.BlockDate {
		from, to, size = r.FromDate, r.ToDate, r.MaxSpan
	}
	done, total := progressOf(*out)
	p.Queue(insertRangesSQL(req.Kind), req.TaskID, req.ExecutionID, from, to, size, int32(room), req.Continue,
		req.retryLimit(), total, done).Query(func(rows pgx.Rows) error {
		var created []BlockRow
		if err := pgxscan.ScanAll(&created, rows); err != nil {
			return err
		}
		*out = append(*out, created...)
		return nil
	})
}

// progressOf is what blocks taken add to their execution's progress.
func progressOf(blocks []BlockRow) (done, total int64) {
	for _, b := range blocks {
		if !b.Retaken { // its execution counted it when it took it first
			total += b.Units()
			done += b.ItemsDone
		}
	}
	return done, total
}

// queueProgress queues the addition of blocks taken to their execution's progress.
func queueProgress(p *execution.Pipeline, exec int64, blocks []BlockRow) {
	if done, total := progressOf(blocks); total != 0 {
		p.Queue(addProgressSQL, exec, done, total)
	}
}

// createBlocks queues the creation of req's new list or object blocks (all of them: they are
// uncapped) with the addition of them and of the blocks claimed before them to the execution's
// progress (counted; not when there was nothing to create). The created blocks join *out when the
// statement is sent; list blocks' items are copied after it.
func (s *Store) createBlocks(ctx context.Context, p *execution.Pipeline, req TakeBlocksRequest, out *[]BlockRow) (counted bool, _ error) {
	nb, err := req.New()
	if err != nil {
		return false, err
	}
	n := nb.count()
	if n == 0 {
		return false, nil
	}
	vals, counts := make([]*string, n), make([]*int32, n) // jsonb as text: every exec mode types it
	text := func(b []byte) *string {
		if b == nil {
			return nil
		}
		s := string(b)
		return &s
	}
	for i := range n {
		switch req.Kind {
		case codes.BlockObject:
			vals[i] = text(nb.Values[i])
		case codes.BlockList:
			vals[i] = text(nb.Header)
			c := int32(len(nb.Items[i]))
			counts[i] = &c
		}
	}
	done, total := progressOf(*out)
	var created []BlockRow
	p.Queue(insertBlocksSQL, req.TaskID, req.ExecutionID, req.Kind, vals, counts, req.retryLimit(), total, done).Query(func(rows pgx.Rows) error {
		if err := pgxscan.ScanAll(&created, rows); err != nil {
			return err
		}
		*out = append(*out, created...)
		return nil
	})
	if req.Kind == codes.BlockList {
		if err := p.Send(ctx); err != nil {
			return false, err
		}
		if err := insertItems(ctx, p, created, nb.Items); err != nil {
			return false, err
		}
	}
	return true, nil
}

// insertItems copies the items of the list blocks just created (rows, in creation order).
func insertItems(ctx context.Context, p *execution.Pipeline, rows []BlockRow, items [][][]byte) error {
	if len(rows) != len(items) {
		return fmt.Errorf("created %d list blocks of %d", len(rows), len(items))
	}
	var copyRows [][]any
	for i, b := range rows {
		for n, v := range items[i] {
			copyRows = append(copyRows, []any{b.ID, int32(n + 1), string(v)})
		}
	}
	_, err := p.CopyFrom(ctx, pgx.Identifier{"taskling", "list_item"}, []string{"block_id", "n", "value"}, pgx.CopyFromRows(copyRows))
	return err
}

// setBlockStatusSQL moves block $1's attempt $2 (if still its latest and not ended) to status
// $3, and adds $5 done items to its execution's progress.
const setBlockStatusSQL = `
WITH b AS (
    UPDATE taskling.block SET status = $3
    WHERE id = $1 AND attempts = $2 AND status IN (taskling.block_status('not_started'), taskling.block_status('started'))
    RETURNING id, execution_id
), a AS (
    UPDATE taskling.block_attempt a
    SET status = $3,
        started_at = CASE WHEN $3 = taskling.block_status('started') THEN clock_timestamp() ELSE a.started_at END,
        ended_at = CASE WHEN $3 IN (taskling.block_status('completed'), taskling.block_status('failed')) THEN clock_timestamp() END,
        items_done = coalesce($4, a.items_done),
        message = coalesce($6, a.message)
    FROM b WHERE a.block_id = b.id AND a.attempt = $2
    RETURNING a.block_id
), p AS (
    UPDATE taskling.task_execution e SET items_done = coalesce(e.items_done, 0) + $5
    FROM b WHERE $5 <> 0 AND e.id = b.execution_id
)
SELECT count(*) FROM a`

// SetBlockStatus moves a block's attempt to status (started, completed or failed); itemsDone
// (nil: unchanged) is stored with it, progress is added to its execution's items done, message
// (nil: none) is a failure's. ErrBlockLost when the attempt is not the block's latest or has
// ended.
func (s *Store) SetBlockStatus(ctx context.Context, blockID int64, attempt int, status int16, itemsDone *int64, progress int64, message *string) error {
	var n int
	if err := s.db.QueryRow(ctx, setBlockStatusSQL, blockID, attempt, status, itemsDone, progress, message).Scan(&n); err != nil {
		return fmt.Errorf("block %d attempt %d: %w", blockID, attempt, err)
	}
	if n == 0 {
		return fmt.Errorf("block %d attempt %d: %w", blockID, attempt, ErrBlockLost)
	}
	return nil
}

// noteFailureSQL gives the attempts execution $1 started and has not ended (its blocks are dead
// once it ends) the error it failed with, unless they have a message. Served by
// block_attempt_execution_idx.
const noteFailureSQL = `
UPDATE taskling.block_attempt a SET message = $2
FROM taskling.block b
WHERE a.execution_id = $1 AND a.status = taskling.block_status('started') AND a.message IS NULL
  AND b.id = a.block_id AND b.attempts = a.attempt AND b.status = taskling.block_status('started')`

// NoteBlockFailure records message on the block attempts execID started and has not ended.
func (s *Store) NoteBlockFailure(ctx context.Context, execID int64, message string) error {
	if _, err := s.db.Exec(ctx, noteFailureSQL, execID, message); err != nil {
		return fmt.Errorf("note the failure of execution %d on its blocks: %w", execID, err)
	}
	return nil
}

// ItemRow is a list block's item.
type ItemRow struct {
	N         int       `db:"n"`
	Value     []byte    `db:"value"`
	Status    int16     `db:"status"`
	Reason    *string   `db:"reason"`
	Step      *int16    `db:"step"`
	UpdatedAt time.Time `db:"updated_at"`
}

// Items returns a list block's items with one of statuses (all if none), in order.
func (s *Store) Items(ctx context.Context, blockID int64, statuses []int16) ([]ItemRow, error) {
	var out []ItemRow
	err := pgxscan.Select(ctx, s.db, &out, `SELECT n, value, status, reason, step, updated_at FROM taskling.list_item
        WHERE block_id = $1 AND (cardinality($2::smallint[]) = 0 OR status = ANY($2)) ORDER BY n`, blockID, statuses)
	if err != nil {
		return nil, fmt.Errorf("items of block %d: %w", blockID, err)
	}
	return out, nil
}

// ItemUpdate is one item's new status.
type ItemUpdate struct {
	N      int
	Status int16
	Reason *string
	Step   *int16
}

// updateItemsSQL writes item statuses of block $1 while attempt $2 is its latest and running: the
// block row is locked (FOR SHARE) against a taker until the statement commits. Items newly
// completed or discarded are added to the execution's progress (o: the items as they were).
const updateItemsSQL = `
WITH b AS (
    SELECT id, execution_id FROM taskling.block
    WHERE id = $1 AND attempts = $2 AND status IN (taskling.block_status('not_started'), taskling.block_status('started'))
    FOR SHARE
), upd AS (
    UPDATE taskling.list_item i SET status = u.status, reason = u.reason, step = u.step, updated_at = clock_timestamp()
    FROM unnest($3::integer[], $4::smallint[], $5::text[], $6::smallint[]) AS u(n, status, reason, step), taskling.list_item o
    WHERE i.block_id = $1 AND i.n = u.n AND o.block_id = $1 AND o.n = u.n AND EXISTS (SELECT 1 FROM b)
    RETURNING i.status, o.status AS old
), p AS (
    UPDATE taskling.task_execution e
    SET items_done = coalesce(e.items_done, 0) + (
        SELECT count(*) FILTER (WHERE status IN (taskling.item_status('completed'), taskling.item_status('discarded')) AND old NOT IN (taskling.item_status('completed'), taskling.item_status('discarded')))
             - count(*) FILTER (WHERE status NOT IN (taskling.item_status('completed'), taskling.item_status('discarded')) AND old IN (taskling.item_status('completed'), taskling.item_status('discarded')))
        FROM upd)
    FROM b WHERE e.id = b.execution_id
)
SELECT (SELECT count(*) FROM b), (SELECT count(*) FROM upd)`

// UpdateItems writes item statuses of a list block's attempt in one statement. ErrBlockLost when
// the attempt is not the block's latest or has ended; an error naming them when items are
// missing.
func (s *Store) UpdateItems(ctx context.Context, blockID int64, attempt int, updates []ItemUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	updates = lastPerItem(updates)
	ns, sts := make([]int32, len(updates)), make([]int16, len(updates))
	reasons, steps := make([]*string, len(updates)), make([]*int16, len(updates))
	for i, u := range updates {
		ns[i], sts[i], reasons[i], steps[i] = int32(u.N), u.Status, u.Reason, u.Step
	}
	var locked, updated int
	// PostgreSQL keeps planning this statement afresh at every call (its custom plans, which see
	// the arrays' lengths, look cheaper than the generic one), and planning cost about five times
	// executing it: the transaction asks for the generic plan. One round trip all the same.
	err := s.proto.PipelineTx(ctx, func(ctx context.Context, p *execution.Pipeline) error {
		p.Queue(genericPlansSQL)
		p.Queue(updateItemsSQL, blockID, attempt, ns, sts, reasons, steps).QueryRow(func(row pgx.Row) error {
			return row.Scan(&locked, &updated)
		})
		return nil
	})
	if err != nil {
		return fmt.Errorf("items of block %d: %w", blockID, err)
	}
	switch {
	case locked == 0:
		return fmt.Errorf("items of block %d attempt %d: %w", blockID, attempt, ErrBlockLost)
	case updated != len(updates):
		return fmt.Errorf("block %d: %d of %d items updated (unknown item numbers)", blockID, updated, len(updates))
	}
	return nil
}

// lastPerItem keeps the last update of each item, in order (one row is updated once per
// statement).
func lastPerItem(updates []ItemUpdate) []ItemUpdate {
	last := make(map[int]int, len(updates))
	for i, u := range updates {
		last[u.N] = i
	}
	if len(last) == len(updates) {
		return updates
	}
	out := make([]ItemUpdate, 0, len(last))
	for i, u := range updates {
		if last[u.N] == i {
			out = append(out, u)
		}
	}
	return out
}

// ItemCounts are a list block's items by status.
type ItemCounts struct {
	Pending, Completed, Failed, Discarded int64
}

const countItemsSQL = `
SELECT count(*) FILTER (WHERE status = taskling.item_status('pending')), count(*) FILTER (WHERE status = taskling.item_status('completed')),
    count(*) FILTER (WHERE status = taskling.item_status('failed')), count(*) FILTER (WHERE status = taskling.item_status('discarded'))
FROM taskling.list_item WHERE block_id = $1`

// CountItems counts a list block's items by status.
func (s *Store) CountItems(ctx context.Context, blockID int64) (ItemCounts, error) {
	var c ItemCounts
	err := s.db.QueryRow(ctx, countItemsSQL, blockID).Scan(&c.Pending, &c.Completed, &c.Failed, &c.Discarded)
	if err != nil {
		return c, fmt.Errorf("items of block %d: %w", blockID, err)
	}
	return c, nil
}

// LastBlock returns the task's last block of kind, by order: "created" (the newest), "from" (the
// greatest start) or "to" (the greatest end); ok is false when there is none.
func (s *Store) LastBlock(ctx context.Context, taskID int64, kind int16, order string) (row BlockRow, ok bool, err error) {
	sql := map[string]string{"created": lastCreatedSQL, "from": lastFromSQL, "to": lastToSQL}[order]
	if sql == "" {
		return row, false, fmt.Errorf("unknown last-block order %q", order)
	}
	var rows []BlockRow
	if err = pgxscan.Select(ctx, s.db, &rows, sql, taskID, kind); err != nil || len(rows) == 0 {
		return row, false, err
	}
	return rows[0], true, nil
}

// lastCreatedSQL, lastFromSQL and lastToSQL read task $1's last block of kind $2: the newest, the
// one with the greatest start, the one with the greatest end.
const (
	lastCreatedSQL = `
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, false AS forced, 0::bigint AS items_done
FROM taskling.block b WHERE b.task_id = $1 AND b.kind = $2
ORDER BY b.id DESC LIMIT 1`
	lastFromSQL = `
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, false AS forced, 0::bigint AS items_done
FROM taskling.block b WHERE b.task_id = $1 AND b.kind = $2
ORDER BY b.from_number DESC NULLS LAST, b.from_date DESC NULLS LAST, b.id DESC LIMIT 1`
	lastToSQL = `
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id, false AS forced, 0::bigint AS items_done
FROM taskling.block b WHERE b.task_id = $1 AND b.kind = $2
ORDER BY b.to_number DESC NULLS LAST, b.to_date DESC NULLS LAST, b.id DESC LIMIT 1`
)

// ErrBlockNotFound: no block has the id.
var ErrBlockNotFound = errors.New("no such block")

// ForceBlock queues block id to be taken first by the next execution of its task that asks for
// blocks of its kind (again: once queued, forcing it is a no-op until taken), and records the
// operator change ("block #ID": its status → forced) in the same statement, under the task's
// force lock (taskling.lock_task_forces, which the cleanup takes too); forced_by is the principal. It returns the block's task.
func (s *Store) ForceBlock(ctx context.Context, id int64, op execution.Operator) (int64, error) {
	var task int64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT taskling.lock_task_forces(task_id) FROM taskling.block WHERE id = $1`, id)
		b.Queue(forceBlockSQL, id, op.By, op.Principal).QueryRow(func(row pgx.Row) error { return row.Scan(&task) })
		return tx.SendBatch(ctx, b).Close()
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("block %d: %w", id, ErrBlockNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("force block %d: %w", id, err)
	}
	return task, nil
}

const forceBlockSQL = `
WITH b AS (SELECT id, task_id, status FROM taskling.block WHERE id = $1),
ins AS (
    INSERT INTO taskling.forced_block (block_id, task_id, forced_by) SELECT id, task_id, $3 FROM b
    ON CONFLICT (block_id) WHERE taken_at IS NULL DO NOTHING
    RETURNING block_id
),
ch AS (
    INSERT INTO taskling.operator_change (task_id, changed_by, principal, field, old_value, new_value)
    SELECT b.task_id, $2, $3, 'block #' || b.id, taskling.block_status_name(b.status), 'forced'
    FROM b JOIN ins ON ins.block_id = b.id
)
SELECT task_id FROM b`

// blockCountsSQL counts every task's blocks by status, a block not live and not ended counted
// as dead.
const blockCountsSQL = `
SELECT d.application_name, d.task_name,
    CASE WHEN b.status IN (taskling.block_status('not_started'), taskling.block_status('started')) AND NOT taskling.block_live(b)
         THEN 'dead' ELSE taskling.block_status_name(b.status) END AS status,
    count(*) AS blocks, count(*) FILTER (WHERE taskling.block_at_retry_limit(b)) AS at_retry_limit
FROM taskling.block b
JOIN taskling.task_definition d ON d.id = b.task_id
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`

// BlockCounts counts every task's blocks by status (for metrics).
func (s *Store) BlockCounts(ctx context.Context) ([]tasklingtype.BlockCount, error) {
	rows, err := s.db.Query(ctx, blockCountsSQL)
	if err != nil {
		return nil, fmt.Errorf("count blocks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.BlockCount, error) {
		var c tasklingtype.BlockCount
		err := row.Scan(&c.Application, &c.Task, &c.Status, &c.Blocks, &c.AtRetryLimit)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count blocks: %w", err)
	}
	return out, nil
}

// The block reads: each block with its latest attempt's state (dead, a pending force, its
// message, its retry limit), in scanBlock's order.

// executionBlocksSQL lists the blocks execution $1 attempted, by block id.
const executionBlocksSQL = `
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id,
    b.status IN (taskling.block_status('not_started'), taskling.block_status('started')) AND NOT taskling.block_live(b) AS dead,
    EXISTS (SELECT 1 FROM taskling.forced_block f WHERE f.block_id = b.id AND f.taken_at IS NULL) AS force_pending,
    (SELECT a.message FROM taskling.block_attempt a WHERE a.block_id = b.id AND a.attempt = b.attempts) AS message,
    b.retry_limit, taskling.block_at_retry_limit(b) AS at_retry_limit
FROM taskling.block b
WHERE b.id IN (SELECT block_id FROM taskling.block_attempt WHERE execution_id = $1)
ORDER BY b.id`

// taskBlocksSQL lists task $1's blocks, the newest $3 first; $2: only those at their retry limit.
const taskBlocksSQL = `
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id,
    b.status IN (taskling.block_status('not_started'), taskling.block_status('started')) AND NOT taskling.block_live(b) AS dead,
    EXISTS (SELECT 1 FROM taskling.forced_block f WHERE f.block_id = b.id AND f.taken_at IS NULL) AS force_pending,
    (SELECT a.message FROM taskling.block_attempt a WHERE a.block_id = b.id AND a.attempt = b.attempts) AS message,
    b.retry_limit, taskling.block_at_retry_limit(b) AS at_retry_limit
FROM taskling.block b
WHERE b.task_id = $1 AND (NOT $2 OR taskling.block_at_retry_limit(b))
ORDER BY b.id DESC LIMIT $3`

// blockByIDSQL reads block $1.
const blockByIDSQL = `
SELECT b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id,
    b.status IN (taskling.block_status('not_started'), taskling.block_status('started')) AND NOT taskling.block_live(b) AS dead,
    EXISTS (SELECT 1 FROM taskling.forced_block f WHERE f.block_id = b.id AND f.taken_at IS NULL) AS force_pending,
    (SELECT a.message FROM taskling.block_attempt a WHERE a.block_id = b.id AND a.attempt = b.attempts) AS message,
    b.retry_limit, taskling.block_at_retry_limit(b) AS at_retry_limit
FROM taskling.block b
WHERE b.id = $1`

// scanBlock scans a block read's columns. A block whose latest attempt did not end while its
// execution no longer runs is dead; a NULL message reads as "".
func scanBlock(row pgx.CollectableRow) (tasklingtype.BlockInfo, error) {
	var (
		b            tasklingtype.BlockInfo
		kind, status int16
		value        []byte // jsonb's text as is
		dead         bool
	)
	err := row.Scan(&b.ID, &b.TaskID, &kind, &b.FromNumber, &b.ToNumber, &b.FromTime, &b.ToTime, &value, &b.ItemCount,
		&b.CreatedAt, &b.Attempts, &status, &b.ExecutionID, &dead, &b.ForcePending, (*zeronull.Text)(&b.Message),
		&b.RetryLimit, &b.AtRetryLimit)
	b.Kind = codes.Name("block_kind", kind)
	if b.Kind == "" {
		b.Kind = fmt.Sprintf("BlockKind(%d)", kind)
	}
	b.Status = blockStatus(status, dead)
	b.Value, b.ValueError = storedjson.Read(value)
	return b, err
}

// blockStatus names a block's, or an attempt's, stored status: dead when it did not end and its
// execution no longer runs.
func blockStatus(code int16, dead bool) tasklingtype.BlockStatus {
	if dead {
		return tasklingtype.BlockDead
	}
	return tasklingtype.BlockStatus(codes.Name("block_status", code))
}

// blocks runs a block read.
func (s *Store) blocks(ctx context.Context, sql string, args ...any) ([]tasklingtype.BlockInfo, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanBlock)
}

// ExecutionBlocks lists the blocks an execution attempted, by block id.
func (s *Store) ExecutionBlocks(ctx context.Context, executionID int64) ([]tasklingtype.BlockInfo, error) {
	out, err := s.blocks(ctx, executionBlocksSQL, executionID)
	if err != nil {
		return nil, fmt.Errorf("blocks of execution %d: %w", executionID, err)
	}
	return out, nil
}

// TaskBlocksFilter narrows TaskBlocks: AtLimit keeps the blocks at their retry limit (not
// completed, not live, more attempts than their retry limit); Limit caps the rows (newest first).
type TaskBlocksFilter struct {
	AtLimit bool
	Limit   int
}

// TaskBlocks lists a task's blocks, newest first.
func (s *Store) TaskBlocks(ctx context.Context, taskID int64, f TaskBlocksFilter) ([]tasklingtype.BlockInfo, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	out, err := s.blocks(ctx, taskBlocksSQL, taskID, f.AtLimit, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("blocks of task %d: %w", taskID, err)
	}
	return out, nil
}

// BlockByID returns one block.
func (s *Store) BlockByID(ctx context.Context, id int64) (tasklingtype.BlockInfo, bool, error) {
	out, err := s.blocks(ctx, blockByIDSQL, id)
	if err != nil {
		return tasklingtype.BlockInfo{}, false, fmt.Errorf("block %d: %w", id, err)
	}
	if len(out) == 0 {
		return tasklingtype.BlockInfo{}, false, nil
	}
	return out[0], true, nil
}

// blockAttemptsSQL lists block $1's attempts, each judged like the block (taskling.execution_status,
// on its own execution): one that did not end is dead once its execution no longer runs, and once it is
// not the latest (the block was taken from it, which only happens to an attempt that ended or
// whose execution did not run; an execution judged dead may read running again until reclaimed,
// as a paused process resumes, but its attempt stays superseded). Derived when read, like the
// block's status: a death is a moment on the clock, not a write.
const blockAttemptsSQL = `
SELECT a.attempt, a.execution_id, a.status, a.forced, a.created_at, a.started_at, a.ended_at, a.items_done, a.message,
    (a.status IN (taskling.block_status('not_started'), taskling.block_status('started'))
        AND (a.attempt < b.attempts OR taskling.execution_status(e, x, s.last_heartbeat) IS DISTINCT FROM 'in_progress')) AS dead
FROM taskling.block_attempt a
JOIN taskling.block b ON b.id = a.block_id
LEFT JOIN taskling.task_execution e ON e.id = a.execution_id
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE a.block_id = $1
ORDER BY a.attempt`

// BlockAttempts lists a block's attempts, first first. One is dead when it did not end and its
// execution no longer runs or a later attempt took the block; a NULL message reads as "".
func (s *Store) BlockAttempts(ctx context.Context, id int64) ([]tasklingtype.BlockAttemptInfo, error) {
	rows, err := s.db.Query(ctx, blockAttemptsSQL, id)
	if err != nil {
		return nil, fmt.Errorf("attempts of block %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.BlockAttemptInfo, error) {
		var a tasklingtype.BlockAttemptInfo
		var status int16
		var dead bool
		err := row.Scan(&a.Attempt, &a.ExecutionID, &status, &a.Forced, &a.CreatedAt, &a.StartedAt, &a.EndedAt, &a.ItemsDone,
			(*zeronull.Text)(&a.Message), &dead)
		a.Status = blockStatus(status, dead)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of block %d: %w", id, err)
	}
	return out, nil
}

package execution

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"
)

// Blocks (migration 0008): an execution's work in durable units. Taking a block — a new one, or
// one to run again — writes its next attempt: the block row's latest attempt moves by
// compare-and-set (FOR UPDATE SKIP LOCKED, then attempts = the value read), and block_attempt's
// key (block, attempt) refuses a second taker, so two executions never hold one block. A block
// whose latest attempt did not end is live while its execution runs, judged exactly like a slot
// (statusSQL): once that execution is dead, reclaimed or ended, the block is dead.

// Block kinds, as stored.
const (
	BlockNumeric int16 = 1
	BlockDate    int16 = 2
	BlockList    int16 = 3
	BlockObject  int16 = 4
)

// Block attempt statuses, as stored.
const (
	BlockNotStarted int16 = 1
	BlockStarted    int16 = 2
	BlockCompleted  int16 = 3
	BlockFailed     int16 = 4
)

// List item statuses, as stored.
const (
	ItemPending   int16 = 1
	ItemCompleted int16 = 2
	ItemFailed    int16 = 3
	ItemDiscarded int16 = 4
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
	// New creates the new blocks, given the end of the task's last block of this kind (nil if
	// none, or without Continue) and how many may be created (-1: any number). nil: no new blocks.
	New func(last *BlockEnd, room int) (NewBlocks, error)
	// Continue: the new blocks continue from the last one, so their creation is serialized per
	// task (numeric and date blocks).
	Continue bool
	// Uncapped: every new block is created and taken, whatever Max (list and object blocks: their
	// items exist only in this request).
	Uncapped bool
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

// BlockEnd is where the task's last block of a kind ends: the greatest to_number or to_date.
type BlockEnd struct {
	Number int64
	Date   time.Time
}

// NewBlocks are blocks to create, all of the request's kind.
type NewBlocks struct {
	FromNumbers, ToNumbers []int64
	FromDates, ToDates     []time.Time
	Values                 [][]byte   // object values
	Header                 []byte     // list blocks' header
	Items                  [][][]byte // list blocks' items, one slice per block
}

func (n NewBlocks) count() int {
	return max(len(n.FromNumbers), len(n.FromDates), len(n.Values), len(n.Items))
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

const blockColumns = `b.id, b.task_id, b.kind, b.from_number, b.to_number, b.from_date, b.to_date, b.value,
    b.item_count, b.created_at, b.attempts, b.status, b.execution_id`

// ownerFrom joins a block (b) with its latest attempt's execution (e), its end (x) and session
// (s), for statusSQL. A block whose execution row is gone has a dead owner (statusSQL on NULLs).
const ownerFrom = `taskling.block b
    LEFT JOIN taskling.task_execution e ON e.id = b.execution_id
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id`

// notLiveSQL: block b's latest attempt ended, or its execution is not running.
var notLiveSQL = `(b.status >= 3 OR ` + statusSQL + ` <> 'in_progress')`

// ownerLiveSQL: block b's latest attempt's execution runs, judged in a subquery on b, so that
// the re-check of a row another claim changed meanwhile (FOR UPDATE in READ COMMITTED reads its
// newest version) judges the new owner, and skips the row for the next one instead of locking it
// and finding its attempt count changed.
var ownerLiveSQL = `EXISTS (SELECT 1 FROM taskling.task_execution e
        LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
        LEFT JOIN taskling.session s ON s.id = e.session_id
        WHERE e.id = b.execution_id AND ` + statusSQL + ` = 'in_progress')`

// ownerStartSQL: when block b's latest attempt's execution started (the block's creation if the
// row is gone), for the detection windows.
const ownerStartSQL = `coalesce((SELECT e.started_at FROM taskling.task_execution e WHERE e.id = b.execution_id), b.created_at)`

// claimSQL takes, for execution $4, up to $3 blocks of task $1 and kind $2 chosen by where,
// oldest first, each with its next attempt ($5: forced; $6: the request's retry limit). The
// attempt count read must still be the row's when it is written (a compare-and-set, on top of the
// row lock), and (block, attempt) is block_attempt's key: two claims never take one attempt.
func claimSQL(where string) string {
	return `
WITH cand AS (
    SELECT b.id, b.attempts, b.execution_id AS prev, b.status AS prev_status
    FROM taskling.block b
    WHERE b.task_id = $1 AND b.kind = $2 AND (b.status >= 3 OR NOT ` + ownerLiveSQL + `) AND ` + where + `
    ORDER BY b.created_at, b.id
    LIMIT $3
    FOR UPDATE OF b SKIP LOCKED
), claimed AS (
    UPDATE taskling.block b SET attempts = b.attempts + 1, status = 1, execution_id = $4, retry_limit = $6
    FROM cand WHERE b.id = cand.id AND b.attempts = cand.attempts
    RETURNING b.*
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id, forced)
    SELECT id, attempts, $4, $5 FROM claimed
), forced AS (
    -- a forced block taken another way (dead, failed) has run again too
    UPDATE taskling.forced_block f SET taken_at = clock_timestamp(), taken_by = $4
    FROM claimed WHERE f.block_id = claimed.id AND f.taken_at IS NULL
)
SELECT ` + blockColumns + `, $5 AS forced,
    -- counted already by this execution, unless it completed it before (forced again: new work)
    cand.prev = $4 AND cand.prev_status <> 3 AS retaken,
    (SELECT count(*) FROM taskling.list_item i WHERE i.block_id = b.id AND i.status IN (2, 4)) AS items_done
FROM claimed b JOIN cand ON cand.id = b.id
ORDER BY b.created_at, b.id`
}

var (
	claimForcedSQL = claimSQL(`b.id IN (SELECT f.block_id FROM taskling.forced_block f WHERE f.task_id = $1 AND f.taken_at IS NULL)`)
	// $9: 1 or 2, the dead blocks never started, or those started (TakeBlocks takes them in that
	// order, each oldest first by block_pickup_idx).
	claimDeadSQL   = claimSQL(`b.status = $9 AND b.attempts <= $7 AND ` + ownerStartSQL + ` >= clock_timestamp() - $8::interval`)
	claimFailedSQL = claimSQL(`b.status = 4 AND b.attempts <= $7 AND ` + ownerStartSQL + ` >= clock_timestamp() - $8::interval`)
	claimRefSQL    = claimSQL(`($8 OR b.status <> 3) AND EXISTS (SELECT 1 FROM taskling.block_attempt a
        JOIN taskling.task_execution r ON r.id = a.execution_id WHERE a.block_id = b.id AND r.reference_value = $7)`)
)

// blockLockClass is the first key of the advisory lock that serializes the creation of a task's
// new blocks (the second is the task id): "tkbl".
const blockLockClass = 0x746b626c

const lastBlockEndSQL = `SELECT max(to_number), max(to_date) FROM taskling.block WHERE task_id = $1 AND kind = $2`

// insertBlocksSQL creates the new blocks of execution $2 (first attempt) for task $1, kind $3;
// a range that exists already is skipped.
const insertBlocksSQL = `
WITH nb AS (
    INSERT INTO taskling.block (task_id, kind, execution_id, from_number, to_number, from_date, to_date, value, item_count, retry_limit)
    SELECT $1, $3, $2, fn, tn, fd, td, v, coalesce(ic, 0), $10
    FROM unnest($4::bigint[], $5::bigint[], $6::timestamptz[], $7::timestamptz[], $8::jsonb[], $9::integer[])
        WITH ORDINALITY AS u(fn, tn, fd, td, v, ic, ord)
    ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING *
), attempt AS (
    INSERT INTO taskling.block_attempt (block_id, attempt, execution_id) SELECT id, 1, $2 FROM nb
), p AS (
    UPDATE taskling.task_execution SET items_done = coalesce(items_done, 0) + $12,
        items_total = coalesce(items_total, 0) + $11 + (SELECT coalesce(sum(` + blockUnitsSQL + `), 0) FROM nb b)
    WHERE id = $2
)
SELECT ` + blockColumns + `, false AS forced, 0::bigint AS items_done FROM nb b ORDER BY b.id`

// blockUnitsSQL is BlockRow.Units of block b.
const blockUnitsSQL = `CASE b.kind WHEN 1 THEN b.to_number - b.from_number + 1 WHEN 3 THEN b.item_count ELSE 1 END`

// Units is a block's weight in its execution's progress: its numbers, its items, or one
// (blockUnitsSQL in SQL).
func (b BlockRow) Units() int64 {
	switch b.Kind {
	case BlockNumeric:
		if b.FromNumber == nil || b.ToNumber == nil { // refused by the table's checks
			return 1
		}
		return *b.ToNumber - *b.FromNumber + 1
	case BlockList:
		return int64(b.ItemCount)
	}
	return 1
}

const addProgressSQL = `UPDATE taskling.task_execution
SET items_done = coalesce(items_done, 0) + $2, items_total = coalesce(items_total, 0) + $3 WHERE id = $1`

// TakeBlocks serves req in one READ COMMITTED transaction and returns the blocks taken, in the
// order forced, dead (never started, then started), failed, new (oldest first within each), and
// adds them to the execution's progress.
func (s *Store) TakeBlocks(ctx context.Context, req TakeBlocksRequest) ([]BlockRow, error) {
	var out []BlockRow
	err := s.blockTx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		room := func() int {
			if req.Max <= 0 {
				return math.MaxInt32
			}
			return req.Max - len(out)
		}
		claim := func(sql string, forced bool, args ...any) error {
			if room() <= 0 {
				return nil
			}
			var rows []BlockRow
			all := append([]any{req.TaskID, req.Kind, room(), req.ExecutionID, forced, req.retryLimit()}, args...)
			if err := pgxscan.Select(ctx, tx, &rows, sql, all...); err != nil {
				return err
			}
			out = append(out, rows...)
			return nil
		}
		if req.Reference != nil {
			if err := claim(claimRefSQL, false, *req.Reference, req.ReferenceAll); err != nil {
				return err
			}
			return addProgress(ctx, tx, req.ExecutionID, out)
		}
		if err := claim(claimForcedSQL, true); err != nil {
			return err
		}
		if r := req.Dead; r != nil {
			// A run that dies on one block (a panic every time) leaves dead the blocks it had
			// taken but not reached yet: they come first, so that the poison one cannot hold
			// them back until their retries are spent.
			for _, status := range []int16{BlockNotStarted, BlockStarted} {
				if err := claim(claimDeadSQL, false, r.Limit, r.Within, status); err != nil {
					return err
				}
			}
		}
		if r := req.Failed; r != nil {
			if err := claim(claimFailedSQL, false, r.Limit, r.Within); err != nil {
				return err
			}
		}
		if req.New != nil && (room() > 0 || req.Uncapped) {
			r := room()
			if req.Uncapped {
				r = math.MaxInt32
			}
			created, counted, err := s.createBlocks(ctx, tx, req, r, out)
			if err != nil {
				return err
			}
			out = append(out, created...)
			if counted {
				return nil
			}
		}
		return addProgress(ctx, tx, req.ExecutionID, out)
	})
	if err != nil {
		return nil, fmt.Errorf("execution: take blocks of task %d: %w", req.TaskID, err)
	}
	return out, nil
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

func addProgress(ctx context.Context, tx pgx.Tx, exec int64, blocks []BlockRow) error {
	done, total := progressOf(blocks)
	if total == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, addProgressSQL, exec, done, total)
	return err
}

// createBlocks creates req's new blocks and adds them and the blocks claimed before them to the
// execution's progress (counted; not when there was nothing to create). Ranges that continue
// from the last block are created under the task's block lock, so that two executions that
// continue at once never create overlapping ranges; the lock and the read of the last block go in
// one round trip (each statement of a READ COMMITTED batch reads after the one before it).
func (s *Store) createBlocks(ctx context.Context, tx pgx.Tx, req TakeBlocksRequest, room int, claimed []BlockRow) (_ []BlockRow, counted bool, _ error) {
	var last *BlockEnd
	if req.Continue && (req.Kind == BlockNumeric || req.Kind == BlockDate) {
		var n *int64
		var d *time.Time
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1, $2::integer)`, int32(blockLockClass), int32(req.TaskID))
		b.Queue(lastBlockEndSQL, req.TaskID, req.Kind).QueryRow(func(row pgx.Row) error { return row.Scan(&n, &d) })
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, false, err
		}
		switch {
		case n != nil:
			last = &BlockEnd{Number: *n}
		case d != nil:
			last = &BlockEnd{Date: *d}
		}
	}
	if room == math.MaxInt32 {
		room = -1
	}
	nb, err := req.New(last, room)
	if err != nil {
		return nil, false, err
	}
	n := nb.count()
	if n == 0 {
		return nil, false, nil
	}
	fn, tn := make([]*int64, n), make([]*int64, n)
	fd, td := make([]*time.Time, n), make([]*time.Time, n)
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
		case BlockNumeric:
			fn[i], tn[i] = &nb.FromNumbers[i], &nb.ToNumbers[i]
		case BlockDate:
			fd[i], td[i] = &nb.FromDates[i], &nb.ToDates[i]
		case BlockObject:
			vals[i] = text(nb.Values[i])
		case BlockList:
			vals[i] = text(nb.Header)
			c := int32(len(nb.Items[i]))
			counts[i] = &c
		}
	}
	done, total := progressOf(claimed)
	var rows []BlockRow
	if err := pgxscan.Select(ctx, tx, &rows, insertBlocksSQL, req.TaskID, req.ExecutionID, req.Kind, fn, tn, fd, td, vals, counts,
		req.retryLimit(), total, done); err != nil {
		return nil, false, err
	}
	if req.Kind == BlockList {
		if err := insertItems(ctx, tx, rows, nb.Items); err != nil {
			return nil, false, err
		}
	}
	return rows, true, nil
}

// insertItems copies the items of the list blocks just created (rows, in creation order).
func insertItems(ctx context.Context, tx pgx.Tx, rows []BlockRow, items [][][]byte) error {
	if len(rows) != len(items) {
		return fmt.Errorf("created %d list blocks of %d", len(rows), len(items))
	}
	var copyRows [][]any
	for i, b := range rows {
		for n, v := range items[i] {
			copyRows = append(copyRows, []any{b.ID, int32(n + 1), string(v)})
		}
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"taskling", "list_item"}, []string{"block_id", "n", "value"}, pgx.CopyFromRows(copyRows))
	return err
}

// blockTx runs fn in a READ COMMITTED transaction (SKIP LOCKED and the compare-and-set above rely
// on its re-reading of changed rows), retrying a serialization failure or deadlock.
func (s *Store) blockTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, fn)
		if err == nil || !isRetryable(err) || attempt >= 5 {
			return err
		}
	}
}

// setBlockStatusSQL moves block $1's attempt $2 (if still its latest and not ended) to status
// $3, and adds $5 done items to its execution's progress.
const setBlockStatusSQL = `
WITH b AS (
    UPDATE taskling.block SET status = $3
    WHERE id = $1 AND attempts = $2 AND status IN (1, 2)
    RETURNING id, execution_id
), a AS (
    UPDATE taskling.block_attempt a
    SET status = $3,
        started_at = CASE WHEN $3 = 2 THEN clock_timestamp() ELSE a.started_at END,
        ended_at = CASE WHEN $3 >= 3 THEN clock_timestamp() END,
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
	if err := s.pool.QueryRow(ctx, setBlockStatusSQL, blockID, attempt, status, itemsDone, progress, message).Scan(&n); err != nil {
		return fmt.Errorf("execution: block %d attempt %d: %w", blockID, attempt, err)
	}
	if n == 0 {
		return fmt.Errorf("execution: block %d attempt %d: %w", blockID, attempt, ErrBlockLost)
	}
	return nil
}

// noteFailureSQL gives the attempts execution $1 started and has not ended (its blocks are dead
// once it ends) the error it failed with, unless they have a message. Served by
// block_attempt_execution_idx.
const noteFailureSQL = `
UPDATE taskling.block_attempt a SET message = $2
FROM taskling.block b
WHERE a.execution_id = $1 AND a.status = 2 AND a.message IS NULL
  AND b.id = a.block_id AND b.attempts = a.attempt AND b.status = 2`

// NoteBlockFailure records message on the block attempts execID started and has not ended.
func (s *Store) NoteBlockFailure(ctx context.Context, execID int64, message string) error {
	if _, err := s.pool.Exec(ctx, noteFailureSQL, execID, message); err != nil {
		return fmt.Errorf("execution: note the failure of execution %d on its blocks: %w", execID, err)
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
	err := pgxscan.Select(ctx, s.pool, &out, `SELECT n, value, status, reason, step, updated_at FROM taskling.list_item
        WHERE block_id = $1 AND (cardinality($2::smallint[]) = 0 OR status = ANY($2)) ORDER BY n`, blockID, statuses)
	if err != nil {
		return nil, fmt.Errorf("execution: items of block %d: %w", blockID, err)
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
    SELECT id, execution_id FROM taskling.block WHERE id = $1 AND attempts = $2 AND status IN (1, 2) FOR SHARE
), upd AS (
    UPDATE taskling.list_item i SET status = u.status, reason = u.reason, step = u.step, updated_at = clock_timestamp()
    FROM unnest($3::integer[], $4::smallint[], $5::text[], $6::smallint[]) AS u(n, status, reason, step), taskling.list_item o
    WHERE i.block_id = $1 AND i.n = u.n AND o.block_id = $1 AND o.n = u.n AND EXISTS (SELECT 1 FROM b)
    RETURNING i.status, o.status AS old
), p AS (
    UPDATE taskling.task_execution e
    SET items_done = coalesce(e.items_done, 0) + (SELECT count(*) FILTER (WHERE status IN (2, 4) AND old NOT IN (2, 4))
        - count(*) FILTER (WHERE status NOT IN (2, 4) AND old IN (2, 4)) FROM upd)
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
	if err := s.pool.QueryRow(ctx, updateItemsSQL, blockID, attempt, ns, sts, reasons, steps).Scan(&locked, &updated); err != nil {
		return fmt.Errorf("execution: items of block %d: %w", blockID, err)
	}
	switch {
	case locked == 0:
		return fmt.Errorf("execution: items of block %d attempt %d: %w", blockID, attempt, ErrBlockLost)
	case updated != len(updates):
		return fmt.Errorf("execution: block %d: %d of %d items updated (unknown item numbers)", blockID, updated, len(updates))
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

// CountItems counts a list block's items by status.
func (s *Store) CountItems(ctx context.Context, blockID int64) (ItemCounts, error) {
	var c ItemCounts
	err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 1), count(*) FILTER (WHERE status = 2),
        count(*) FILTER (WHERE status = 3), count(*) FILTER (WHERE status = 4) FROM taskling.list_item WHERE block_id = $1`,
		blockID).Scan(&c.Pending, &c.Completed, &c.Failed, &c.Discarded)
	if err != nil {
		return c, fmt.Errorf("execution: items of block %d: %w", blockID, err)
	}
	return c, nil
}

// LastBlock returns the task's last block of kind, by order: "created" (the newest), "from" (the
// greatest start) or "to" (the greatest end); ok is false when there is none.
func (s *Store) LastBlock(ctx context.Context, taskID int64, kind int16, order string) (row BlockRow, ok bool, err error) {
	by := map[string]string{"created": "b.id DESC", "from": "b.from_number DESC NULLS LAST, b.from_date DESC NULLS LAST, b.id DESC",
		"to": "b.to_number DESC NULLS LAST, b.to_date DESC NULLS LAST, b.id DESC"}[order]
	if by == "" {
		return row, false, fmt.Errorf("execution: unknown last-block order %q", order)
	}
	var rows []BlockRow
	err = pgxscan.Select(ctx, s.pool, &rows, `SELECT `+blockColumns+`, false AS forced, 0::bigint AS items_done
        FROM taskling.block b WHERE b.task_id = $1 AND b.kind = $2 ORDER BY `+by+` LIMIT 1`, taskID, kind)
	if err != nil || len(rows) == 0 {
		return row, false, err
	}
	return rows[0], true, nil
}

// ErrBlockNotFound: no block has the id.
var ErrBlockNotFound = errors.New("no such block")

// forceLockClass is the first key of the advisory lock that orders the forces of a task's blocks
// and the task's cleanup batches (the second is the task id): "tkfc". A pending force keeps its
// block from the cleanup, and a batch reads the forces only after taking the lock, in a statement
// of its own (a statement's snapshot is taken before it waits): a force committed before it is
// seen and its block kept, and a force that waited for a batch finds its block gone (not found).
const forceLockClass = 0x746b6663

// forceLockSQL takes the force lock of the task whose id is the SQL expression task.
func forceLockSQL(task string) string {
	return fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, (%s & 2147483647)::integer)`, forceLockClass, task)
}

// ForceBlock queues block id to be taken first by the next execution of its task that asks for
// blocks of its kind (again: once queued, forcing it is a no-op until taken), and records the
// operator change ("block #ID": its status → forced) in the same statement, under the task's
// force lock (forceLockClass); forced_by is the principal. It returns the block's task.
func (s *Store) ForceBlock(ctx context.Context, id int64, op Operator) (int64, error) {
	var task int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(forceLockSQL("task_id")+` FROM taskling.block WHERE id = $1`, id)
		b.Queue(forceBlockSQL, id, op.By, op.Principal).QueryRow(func(row pgx.Row) error { return row.Scan(&task) })
		return tx.SendBatch(ctx, b).Close()
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("execution: block %d: %w", id, ErrBlockNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("execution: force block %d: %w", id, err)
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
    SELECT b.task_id, $2, $3, 'block #' || b.id, (ARRAY['not_started', 'started', 'completed', 'failed'])[b.status], 'forced'
    FROM b JOIN ins ON ins.block_id = b.id
)
SELECT task_id FROM b`

// BlockInfo is a block with its latest attempt's state, as operators see it.
type BlockInfo struct {
	BlockRow
	// Live: the latest attempt has not ended and its execution runs; Dead: it has not ended and
	// its execution does not run.
	Live          bool    `db:"live"`
	Dead          bool    `db:"dead"`
	ForcePending  bool    `db:"force_pending"`
	LatestMessage *string `db:"message"`
	RetryLimit    int     `db:"retry_limit"`
	AtRetryLimit  bool    `db:"at_retry_limit"`
}

// BlockCount is how many blocks of a task are in one status ("not_started", "started",
// "completed", "failed", "dead"), and how many of them are at their retry limit.
type BlockCount struct {
	Application  string `db:"application_name"`
	Task         string `db:"task_name"`
	Status       string `db:"status"`
	Blocks       int64  `db:"blocks"`
	AtRetryLimit int64  `db:"at_retry_limit"`
}

// BlockCounts counts every task's blocks by status (for metrics).
func (s *Store) BlockCounts(ctx context.Context) ([]BlockCount, error) {
	var out []BlockCount
	err := pgxscan.Select(ctx, s.pool, &out, `
SELECT d.application_name, d.task_name, CASE WHEN b.status IN (1, 2) AND `+statusSQL+` <> 'in_progress' THEN 'dead'
    ELSE (ARRAY['not_started', 'started', 'completed', 'failed'])[b.status] END AS status,
    count(*) AS blocks, count(*) FILTER (WHERE `+atLimitSQL+`) AS at_retry_limit
FROM `+ownerFrom+`
JOIN taskling.task_definition d ON d.id = b.task_id
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
	if err != nil {
		return nil, fmt.Errorf("execution: count blocks: %w", err)
	}
	return out, nil
}

var blockInfoSQL = `SELECT ` + blockColumns + `, false AS forced, 0::bigint AS items_done,
    (b.status IN (1, 2) AND ` + statusSQL + ` = 'in_progress') AS live,
    (b.status IN (1, 2) AND ` + statusSQL + ` <> 'in_progress') AS dead,
    EXISTS (SELECT 1 FROM taskling.forced_block f WHERE f.block_id = b.id AND f.taken_at IS NULL) AS force_pending,
    (SELECT a.message FROM taskling.block_attempt a WHERE a.block_id = b.id AND a.attempt = b.attempts) AS message,
    b.retry_limit, ` + atLimitSQL + ` AS at_retry_limit
FROM ` + ownerFrom

// ExecutionBlocks lists the blocks an execution attempted, by block id.
func (s *Store) ExecutionBlocks(ctx context.Context, executionID int64) ([]BlockInfo, error) {
	var out []BlockInfo
	err := pgxscan.Select(ctx, s.pool, &out, blockInfoSQL+`
WHERE b.id IN (SELECT block_id FROM taskling.block_attempt WHERE execution_id = $1) ORDER BY b.id`, executionID)
	if err != nil {
		return nil, fmt.Errorf("execution: blocks of execution %d: %w", executionID, err)
	}
	return out, nil
}

// TaskBlocksFilter narrows TaskBlocks: AtLimit keeps the blocks at their retry limit (not
// completed, not live, more attempts than their retry limit); Limit caps the rows (newest first).
type TaskBlocksFilter struct {
	AtLimit bool
	Limit   int
}

// atLimitSQL: block b (ownerFrom) is at its retry limit.
var atLimitSQL = `(b.status <> 3 AND b.attempts > b.retry_limit AND ` + notLiveSQL + `)`

// TaskBlocks lists a task's blocks, newest first.
func (s *Store) TaskBlocks(ctx context.Context, taskID int64, f TaskBlocksFilter) ([]BlockInfo, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var out []BlockInfo
	err := pgxscan.Select(ctx, s.pool, &out, blockInfoSQL+`
WHERE b.task_id = $1 AND (NOT $2 OR `+atLimitSQL+`) ORDER BY b.id DESC LIMIT $3`, taskID, f.AtLimit, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("execution: blocks of task %d: %w", taskID, err)
	}
	return out, nil
}

// BlockByID returns one block.
func (s *Store) BlockByID(ctx context.Context, id int64) (BlockInfo, bool, error) {
	var out []BlockInfo
	if err := pgxscan.Select(ctx, s.pool, &out, blockInfoSQL+` WHERE b.id = $1`, id); err != nil {
		return BlockInfo{}, false, fmt.Errorf("execution: block %d: %w", id, err)
	}
	if len(out) == 0 {
		return BlockInfo{}, false, nil
	}
	return out[0], true, nil
}

// BlockAttempt is one attempt of a block.
type BlockAttempt struct {
	Attempt     int        `db:"attempt"`
	ExecutionID int64      `db:"execution_id"`
	Status      int16      `db:"status"`
	Forced      bool       `db:"forced"`
	CreatedAt   time.Time  `db:"created_at"`
	StartedAt   *time.Time `db:"started_at"`
	EndedAt     *time.Time `db:"ended_at"`
	ItemsDone   *int64     `db:"items_done"`
	Message     *string    `db:"message"`
	// Dead: not ended, and its execution no longer runs or a later attempt took the block.
	Dead bool `db:"dead"`
}

// blockAttemptsSQL lists block $1's attempts, each judged like the block (statusSQL, on its own
// execution): one that did not end is dead once its execution no longer runs, and once it is
// not the latest (the block was taken from it, which only happens to an attempt that ended or
// whose execution did not run; an execution judged dead may read running again until reclaimed,
// as a paused process resumes, but its attempt stays superseded). Derived when read, like the
// block's status: a death is a moment on the clock, not a write.
var blockAttemptsSQL = `
SELECT a.attempt, a.execution_id, a.status, a.forced, a.created_at, a.started_at, a.ended_at, a.items_done, a.message,
    (a.status IN (1, 2) AND (a.attempt < b.attempts OR ` + statusSQL + ` <> 'in_progress')) AS dead
FROM taskling.block_attempt a
JOIN taskling.block b ON b.id = a.block_id
LEFT JOIN taskling.task_execution e ON e.id = a.execution_id
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE a.block_id = $1
ORDER BY a.attempt`

// BlockAttempts lists a block's attempts, first first.
func (s *Store) BlockAttempts(ctx context.Context, id int64) ([]BlockAttempt, error) {
	var out []BlockAttempt
	err := pgxscan.Select(ctx, s.pool, &out, blockAttemptsSQL, id)
	if err != nil {
		return nil, fmt.Errorf("execution: attempts of block %d: %w", id, err)
	}
	return out, nil
}

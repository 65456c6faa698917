package taskling

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/store/blockstore"
)

// Blocks split an execution's work into durable units. An execution asks for blocks of one kind
// (NumericBlocks, DateBlocks, ListBlocks, ObjectBlocks) and gets, in this order: blocks an
// operator forced, then dead blocks and failed blocks (only when BlockOptions asks for them,
// within a retry limit and a detection window), then new ones, at most BlockOptions.MaxBlocks in
// all. Each block it gets is a new attempt of that block (Attempt 1 for a new block), and no
// other execution gets the same block while this attempt is live. A block whose execution dies
// (missed its heartbeat threshold, or was reclaimed, or ended without finishing the block) is
// dead, judged exactly like a slot: by then that execution's Context is already cancelled.

// Limits on what a block stores.
const (
	// MaxBlockValueLength is the longest object block value, list block header or list item, in
	// bytes of JSON.
	MaxBlockValueLength = 1 << 20
	// MaxListBlockSize is the most items one list block holds.
	MaxListBlockSize = 100_000
	// MaxNewBlocks is the most blocks a numeric or date range may make in one call without
	// BlockOptions.MaxBlocks; a longer range is refused (continue it in later calls with MaxBlocks
	// and ContinueFromLast). Object and list blocks are created one per value or chunk.
	MaxNewBlocks = 100_000
)

// ErrBlockLost: the block is no longer this attempt's — its execution was judged dead and another
// execution took the block — or the attempt already ended.
var ErrBlockLost = blockstore.ErrBlockLost

// BlockKind is the kind of a block.
type BlockKind int

const (
	KindNumericRange BlockKind = BlockKind(codes.BlockNumeric)
	KindDateRange    BlockKind = BlockKind(codes.BlockDate)
	KindList         BlockKind = BlockKind(codes.BlockList)
	KindObject       BlockKind = BlockKind(codes.BlockObject)
)

func (k BlockKind) String() string {
	switch k {
	case KindNumericRange:
		return "numeric"
	case KindDateRange:
		return "date"
	case KindList:
		return "list"
	case KindObject:
		return "object"
	}
	return fmt.Sprintf("BlockKind(%d)", int(k))
}

// RetryPolicy takes old blocks again: those whose last attempt's execution started within Within,
// and at most RetryLimit times each (RetryLimit + 1 attempts in all).
type RetryPolicy struct {
	Within     time.Duration
	RetryLimit int
}

// ReprocessReference takes only the blocks attempted by the executions with ReferenceValue:
// those not completed, or every one with All. No forced, dead, failed or new blocks are taken,
// and MaxBlocks still applies.
type ReprocessReference struct {
	ReferenceValue string
	All            bool
}

// BlockOptions choose which blocks an execution gets. A nil *BlockOptions means the blocks an
// operator forced (ForceBlock), then new blocks, with no cap.
type BlockOptions struct {
	// MaxBlocks caps the blocks of one call, forced ones included (0: no cap). New list and
	// object blocks are all created and taken whatever the cap: their items exist only in the
	// call.
	MaxBlocks int
	// ReprocessDead and ReprocessFailed take dead and failed blocks again (nil: never). Dead
	// blocks whose attempt was never started come before those started, so that a block a run
	// dies on every time does not hold back the ones it had not reached.
	ReprocessDead, ReprocessFailed *RetryPolicy
	// OnlyOld creates no new blocks: only forced, dead and failed ones are taken.
	OnlyOld bool
	// ContinueFromLast starts a range after the end of the task's last block of the same kind
	// (the range's From is then only a floor). Two executions that continue at once never create
	// the same or overlapping ranges: creation is serialized per task.
	ContinueFromLast bool
	// Reprocess takes the blocks of earlier executions by their reference value, and nothing else.
	Reprocess *ReprocessReference
}

// NumericRange is the range [From, To] of integers, split into blocks of at most MaxSize
// numbers. Numeric blocks are inclusive at both ends; the blocks of one call never overlap, nor
// do ranges continued with ContinueFromLast. A block's start is unique per task (a range whose
// start exists is skipped), but a range given again without ContinueFromLast, cut differently,
// may overlap blocks that exist.
type NumericRange struct {
	From, To, MaxSize int64
}

// DateRange is the range [From, To) of time, split into blocks of at most MaxSpan. Date blocks
// are half-open: a block ends where the next begins.
type DateRange struct {
	From, To time.Time
	MaxSpan  time.Duration
}

// Block is one attempt of a numeric, date or object block. Its methods are safe for concurrent
// use.
type Block struct {
	ID        int64
	Kind      BlockKind
	Attempt   int  // 1 for a new block
	Forced    bool // an operator forced it to run again
	CreatedAt time.Time
	// From and To: a numeric block's numbers (inclusive).
	From, To int64
	// FromTime and ToTime: a date block's span [FromTime, ToTime).
	FromTime, ToTime time.Time
	// Value: an object block's value (JSON).
	Value json.RawMessage

	e     *Execution
	units int64 // its weight in its execution's progress
	trace blockTrace
}

// blockTrace reports a block attempt's start and end to the hooks (observe.go), once each.
type blockTrace struct{ end atomic.Pointer[func(error)] }

func (t *blockTrace) start(o *startObs, b BlockStart) {
	if done := o.blockStarted(b); done != nil && !t.end.CompareAndSwap(nil, &done) {
		done(nil) // started twice: the first report stands
	}
}

func (t *blockTrace) finish(err error) {
	if done := t.end.Swap(nil); done != nil {
		(*done)(err)
	}
}

// Decode decodes an object block's value into v.
func (b *Block) Decode(v any) error {
	if err := json.Unmarshal(b.Value, v); err != nil {
		return fmt.Errorf("taskling: decode block %d: %w", b.ID, err)
	}
	return nil
}

// Start marks the attempt started.
func (b *Block) Start(ctx context.Context) error {
	b.e.startedBlocks.Store(true)
	if err := b.e.setBlockStatus(ctx, b.ID, b.Attempt, codes.BlockStarted, nil, 0, nil); err != nil {
		return err
	}
	b.trace.start(b.e.obs, BlockStart{ID: b.ID, Kind: b.Kind, Attempt: b.Attempt, Forced: b.Forced})
	return nil
}

// Complete marks the attempt completed, with the number of items it processed (stored with the
// attempt). The execution's progress counts the block's numbers (numeric) or one (date, object).
func (b *Block) Complete(ctx context.Context, itemsProcessed int64) error {
	if itemsProcessed < 0 {
		return fmt.Errorf("%w: Block.Complete: itemsProcessed is %d; must not be negative", ErrInvalidArgument, itemsProcessed)
	}
	if err := b.e.setBlockStatus(ctx, b.ID, b.Attempt, codes.BlockCompleted, &itemsProcessed, b.units, nil); err != nil {
		return err
	}
	b.trace.finish(nil)
	return nil
}

// Fail marks the attempt failed with a message (truncated to MaxMessageLength); the block can be
// taken again by an execution that reprocesses failed blocks.
func (b *Block) Fail(ctx context.Context, message string) error {
	m := truncate(cleanText(message))
	err := b.e.setBlockStatus(ctx, b.ID, b.Attempt, codes.BlockFailed, nil, 0, &m)
	b.trace.finish(errors.New(m))
	return err
}

// blockWrite checks that the execution may still write: not completed, lease held.
func (e *Execution) blockWrite() error {
	if err := e.active(); err != nil {
		return err
	}
	if err := e.Context().Err(); err != nil {
		if cause := context.Cause(e.ctx); cause != nil {
			return fmt.Errorf("taskling: execution %d: %w", e.id, cause)
		}
		return err
	}
	return nil
}

func (e *Execution) setBlockStatus(ctx context.Context, id int64, attempt int, status int16, items *int64, progress int64, message *string) error {
	if err := e.blockWrite(); err != nil {
		return err
	}
	return e.c.blocks.SetBlockStatus(ctx, id, attempt, status, items, progress, message)
}

// afterSpans is from plus n spans, computed in seconds and nanoseconds apart: a Duration saturates
// at ~292 years, so To.Sub(From) would undercount the blocks of a longer range.
func afterSpans(from time.Time, span time.Duration, n int64) time.Time {
	sec, ns := int64(span/time.Second), int64(span%time.Second)
	return time.Unix(from.Unix()+n*sec, int64(from.Nanosecond())+n*ns)
}

// NumericBlocks gets numeric range blocks (see BlockOptions for which). r is split into blocks of
// at most r.MaxSize numbers; with MaxBlocks, only as many new blocks as fit are created (continue
// with ContinueFromLast).
func (e *Execution) NumericBlocks(ctx context.Context, r NumericRange, opts *BlockOptions) ([]*Block, error) {
	if err := wantsNew(opts, func() error {
		switch {
		case r.MaxSize < 1:
			return fmt.Errorf("%w: NumericRange.MaxSize is %d; must be at least 1", ErrInvalidArgument, r.MaxSize)
		case r.From > r.To:
			return fmt.Errorf("%w: NumericRange.From (%d) is after NumericRange.To (%d)", ErrInvalidArgument, r.From, r.To)
		case r.From < 0 && r.To > math.MaxInt64+r.From:
			return fmt.Errorf("%w: NumericRange from %d to %d holds more numbers than an int64 counts", ErrInvalidArgument, r.From, r.To)
		case r.MaxSize > math.MaxInt64/2:
			return fmt.Errorf("%w: NumericRange.MaxSize is %d; at most %d", ErrInvalidArgument, r.MaxSize, int64(math.MaxInt64/2))
		case (opts == nil || opts.MaxBlocks == 0) && (r.To-r.From)/r.MaxSize >= MaxNewBlocks:
			return fmt.Errorf("%w: NumericRange would make more than %d blocks in one call; set BlockOptions.MaxBlocks (with ContinueFromLast to go on later)",
				ErrInvalidArgument, MaxNewBlocks)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err := e.takeBlocks(ctx, codes.BlockNumeric, opts, &blockstore.Ranges{From: r.From, To: r.To, MaxSize: r.MaxSize}, nil)
	return e.blocks(rows), err
}

// DateBlocks gets date range blocks (see BlockOptions for which). r is split into blocks of at
// most r.MaxSpan; the database stores microseconds, so a span must be at least one.
func (e *Execution) DateBlocks(ctx context.Context, r DateRange, opts *BlockOptions) ([]*Block, error) {
	// The database keeps microseconds: blocks are cut on them, so no block shrinks to nothing.
	r.From, r.To, r.MaxSpan = r.From.Truncate(time.Microsecond), r.To.Truncate(time.Microsecond), r.MaxSpan.Truncate(time.Microsecond)
	if err := wantsNew(opts, func() error {
		switch {
		case r.MaxSpan < time.Microsecond:
			return fmt.Errorf("%w: DateRange.MaxSpan is %s; must be at least 1µs", ErrInvalidArgument, r.MaxSpan)
		case !r.From.Before(r.To):
			return fmt.Errorf("%w: DateRange.From (%s) is not before DateRange.To (%s): the range is empty", ErrInvalidArgument,
				r.From.Format(time.RFC3339Nano), r.To.Format(time.RFC3339Nano))
		case (opts == nil || opts.MaxBlocks == 0) && r.To.After(afterSpans(r.From, r.MaxSpan, MaxNewBlocks)):
			return fmt.Errorf("%w: DateRange would make more than %d blocks in one call; set BlockOptions.MaxBlocks (with ContinueFromLast to go on later)",
				ErrInvalidArgument, MaxNewBlocks)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err := e.takeBlocks(ctx, codes.BlockDate, opts, &blockstore.Ranges{FromDate: r.From, ToDate: r.To, MaxSpan: r.MaxSpan}, nil)
	return e.blocks(rows), err
}

// ObjectBlocks gets object blocks (see BlockOptions for which): each new one holds one of values,
// encoded as JSON (at most MaxBlockValueLength bytes, nesting at most MaxJSONDepth levels,
// storable by jsonb as StartOptions.Header says; a refused one is named values[i]).
func (e *Execution) ObjectBlocks(ctx context.Context, values []any, opts *BlockOptions) ([]*Block, error) {
	var encoded [][]byte
	if err := wantsNew(opts, func() error {
		for i, v := range values {
			b, err := encodeValue(fmt.Sprintf("values[%d]", i), v)
			if err != nil {
				return err
			}
			encoded = append(encoded, b)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	newBlocks := func() (blockstore.NewBlocks, error) {
		return blockstore.NewBlocks{Values: encoded}, nil
	}
	rows, err := e.takeBlocks(ctx, codes.BlockObject, opts, nil, newBlocks)
	return e.blocks(rows), err
}

// wantsNew validates what new blocks need, unless opts asks for no new blocks.
func wantsNew(opts *BlockOptions, validate func() error) error {
	if opts != nil && (opts.OnlyOld || opts.Reprocess != nil) {
		return nil
	}
	return validate()
}

// encodeValue encodes a block value or item as JSON of at most MaxBlockValueLength bytes and
// MaxJSONDepth levels that jsonb can store.
func encodeValue(field string, v any) ([]byte, error) {
	return encodeJSON(field, v, MaxBlockValueLength)
}

func (o *BlockOptions) validate() error {
	if o == nil {
		return nil
	}
	if o.MaxBlocks < 0 {
		return fmt.Errorf("%w: BlockOptions.MaxBlocks is %d; must not be negative (0: no cap)", ErrInvalidArgument, o.MaxBlocks)
	}
	for name, p := range map[string]*RetryPolicy{"ReprocessDead": o.ReprocessDead, "ReprocessFailed": o.ReprocessFailed} {
		switch {
		case p == nil:
		case p.Within <= 0:
			return fmt.Errorf("%w: BlockOptions.%s.Within is %s; must be positive", ErrInvalidArgument, name, p.Within)
		case p.RetryLimit < 0:
			return fmt.Errorf("%w: BlockOptions.%s.RetryLimit is %d; must not be negative", ErrInvalidArgument, name, p.RetryLimit)
		}
	}
	if r := o.Reprocess; r != nil {
		if r.ReferenceValue == "" {
			return fmt.Errorf("%w: BlockOptions.Reprocess.ReferenceValue is empty", ErrInvalidArgument)
		}
		if err := validateText("BlockOptions.Reprocess.ReferenceValue", r.ReferenceValue, MaxReferenceValueLength); err != nil {
			return err
		}
	}
	return nil
}

// takeBlocks runs one request for blocks of kind, whose new blocks are ranges (numeric, date) or
// made by newBlocks (list, object).
func (e *Execution) takeBlocks(ctx context.Context, kind int16, opts *BlockOptions, ranges *blockstore.Ranges,
	newBlocks func() (blockstore.NewBlocks, error)) ([]blockstore.BlockRow, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := e.blockWrite(); err != nil {
		return nil, err
	}
	req := blockstore.TakeBlocksRequest{TaskID: e.taskID, ExecutionID: e.id, Kind: kind, New: newBlocks, Ranges: ranges}
	if o := opts; o != nil {
		req.Max = o.MaxBlocks
		if p := o.ReprocessDead; p != nil {
			req.Dead = &blockstore.RetryRule{Within: p.Within, Limit: p.RetryLimit}
		}
		if p := o.ReprocessFailed; p != nil {
			req.Failed = &blockstore.RetryRule{Within: p.Within, Limit: p.RetryLimit}
		}
		req.Continue = o.ContinueFromLast
		if o.OnlyOld {
			req.New, req.Ranges = nil, nil
		}
		if r := o.Reprocess; r != nil {
			req.Reference, req.ReferenceAll, req.New, req.Ranges = &r.ReferenceValue, r.All, nil, nil
		}
	}
	return e.c.blocks.TakeBlocks(ctx, req)
}

func (e *Execution) blocks(rows []blockstore.BlockRow) []*Block {
	out := make([]*Block, len(rows))
	for i, r := range rows {
		out[i] = e.block(r)
	}
	return out
}

func (e *Execution) block(r blockstore.BlockRow) *Block {
	b := &Block{ID: r.ID, Kind: BlockKind(r.Kind), Attempt: r.Attempt, Forced: r.Forced, CreatedAt: r.CreatedAt,
		Value: r.Value, e: e, units: r.Units()}
	if r.FromNumber != nil && r.ToNumber != nil {
		b.From, b.To = *r.FromNumber, *r.ToNumber
	}
	if r.FromDate != nil && r.ToDate != nil {
		b.FromTime, b.ToTime = *r.FromDate, *r.ToDate
	}
	return b
}

// LastBlock returns the task's last block of kind (nil if none), by LastCreated, MaxRangeStart
// or MaxRangeEnd, for information; ContinueFromLast is the safe way to continue a range.
func (e *Execution) LastBlock(ctx context.Context, kind BlockKind, order LastBlockOrder) (*Block, error) {
	name, ok := map[LastBlockOrder]string{LastCreated: "created", MaxRangeStart: "from", MaxRangeEnd: "to"}[order]
	if !ok {
		return nil, fmt.Errorf("%w: LastBlockOrder %d is not one of LastCreated, MaxRangeStart, MaxRangeEnd", ErrInvalidArgument, order)
	}
	if kind < KindNumericRange || kind > KindObject {
		return nil, fmt.Errorf("%w: BlockKind %d is not a block kind", ErrInvalidArgument, kind)
	}
	row, found, err := e.c.blocks.LastBlock(ctx, e.taskID, int16(kind), name)
	if err != nil || !found {
		return nil, err
	}
	b := e.block(row)
	b.Attempt = 0 // not an attempt of this execution
	return b, nil
}

// LastBlockOrder chooses the "last" block.
type LastBlockOrder int

const (
	LastCreated   LastBlockOrder = iota // the newest
	MaxRangeStart                       // the greatest From
	MaxRangeEnd                         // the greatest To
)

// CommitMode says when a list block's item statuses are written.
type CommitMode int

const (
	// CommitEachItem writes each item's status at once (the default).
	CommitEachItem CommitMode = iota
	// CommitPeriodically writes them in batches of ListBlocksRequest.BatchSize.
	CommitPeriodically
	// CommitAtEnd writes them when the block completes or fails, on Flush, or when the execution
	// completes.
	CommitAtEnd
)

// ListBlocksRequest describes new list blocks: Items (each encoded as JSON, at most
// MaxBlockValueLength bytes, nesting at most MaxJSONDepth levels, storable by jsonb as
// StartOptions.Header says) split into blocks of at most MaxBlockSize, each with Header (held
// to the same bounds).
type ListBlocksRequest struct {
	Items        []any
	MaxBlockSize int
	Header       any
	Commit       CommitMode
	// BatchSize is CommitPeriodically's batch (0: 100).
	BatchSize int
}

// ItemStatus is a list item's status.
type ItemStatus int

const (
	ItemPending   ItemStatus = ItemStatus(codes.ItemPending)
	ItemCompleted ItemStatus = ItemStatus(codes.ItemCompleted)
	ItemFailed    ItemStatus = ItemStatus(codes.ItemFailed)
	ItemDiscarded ItemStatus = ItemStatus(codes.ItemDiscarded) // skipped for good; counts as done
)

func (s ItemStatus) String() string {
	switch s {
	case ItemPending:
		return "pending"
	case ItemCompleted:
		return "completed"
	case ItemFailed:
		return "failed"
	case ItemDiscarded:
		return "discarded"
	}
	return fmt.Sprintf("ItemStatus(%d)", int(s))
}

// ListItem is one item of a list block.
type ListItem struct {
	N      int // 1-based position in its block
	Value  json.RawMessage
	Status ItemStatus
	Reason string
	Step   int

	block int64
}

// Decode decodes the item's value into v.
func (i *ListItem) Decode(v any) error {
	if err := json.Unmarshal(i.Value, v); err != nil {
		return fmt.Errorf("taskling: decode list item %d: %w", i.N, err)
	}
	return nil
}

// ListBlock is one attempt of a list block. A retried list block keeps its items' statuses: take
// Items(ctx, ItemPending, ItemFailed) to do only what is left. Its methods are safe for
// concurrent use.
type ListBlock struct {
	ID        int64
	Attempt   int
	Forced    bool
	CreatedAt time.Time
	ItemCount int
	// Header is the block's header (JSON; null if none).
	Header json.RawMessage

	e     *Execution
	mode  CommitMode
	batch int

	mu      sync.Mutex
	pending []blockstore.ItemUpdate
	ended   bool
	trace   blockTrace
}

// DecodeHeader decodes the block's header into v.
func (l *ListBlock) DecodeHeader(v any) error {
	if err := json.Unmarshal(l.Header, v); err != nil {
		return fmt.Errorf("taskling: decode header of block %d: %w", l.ID, err)
	}
	return nil
}

// ListBlocks gets list blocks (see BlockOptions for which). New blocks and their items are
// written in one transaction: a block is never left without its items.
func (e *Execution) ListBlocks(ctx context.Context, r ListBlocksRequest, opts *BlockOptions) ([]*ListBlock, error) {
	var items [][]byte
	var header []byte
	if r.Commit < CommitEachItem || r.Commit > CommitAtEnd {
		return nil, fmt.Errorf("%w: ListBlocksRequest.Commit %d is not a CommitMode", ErrInvalidArgument, r.Commit)
	}
	if r.BatchSize < 0 {
		return nil, fmt.Errorf("%w: ListBlocksRequest.BatchSize is %d; must not be negative (0: 100)", ErrInvalidArgument, r.BatchSize)
	}
	if err := wantsNew(opts, func() error {
		if r.MaxBlockSize < 1 || r.MaxBlockSize > MaxListBlockSize {
			return fmt.Errorf("%w: ListBlocksRequest.MaxBlockSize is %d; must be 1 to %d", ErrInvalidArgument, r.MaxBlockSize, MaxListBlockSize)
		}
		for i, v := range r.Items {
			b, err := encodeValue(fmt.Sprintf("ListBlocksRequest.Items[%d]", i), v)
			if err != nil {
				return err
			}
			items = append(items, b)
		}
		if r.Header != nil {
			var err error
			if header, err = encodeValue("ListBlocksRequest.Header", r.Header); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	newBlocks := func() (blockstore.NewBlocks, error) {
		nb := blockstore.NewBlocks{Header: header}
		for i := 0; i < len(items); i += r.MaxBlockSize {
			nb.Items = append(nb.Items, items[i:min(i+r.MaxBlockSize, len(items))])
		}
		return nb, nil
	}
	rows, err := e.takeBlocks(ctx, codes.BlockList, opts, nil, newBlocks)
	if err != nil {
		return nil, err
	}
	batch := r.BatchSize
	if batch == 0 {
		batch = 100
	}
	out := make([]*ListBlock, len(rows))
	for i, row := range rows {
		out[i] = &ListBlock{ID: row.ID, Attempt: row.Attempt, Forced: row.Forced, CreatedAt: row.CreatedAt, ItemCount: row.ItemCount,
			Header: row.Value, e: e, mode: r.Commit, batch: batch}
		if out[i].Header == nil {
			out[i].Header = json.RawMessage("null")
		}
	}
	e.addLists(out)
	return out, nil
}

// Items returns the block's items with one of statuses (every item if none), in order, as
// stored (statuses not yet committed are not reflected).
func (l *ListBlock) Items(ctx context.Context, statuses ...ItemStatus) ([]*ListItem, error) {
	st := make([]int16, len(statuses))
	for i, s := range statuses {
		if s < ItemPending || s > ItemDiscarded {
			return nil, fmt.Errorf("%w: ItemStatus %d is not an item status", ErrInvalidArgument, s)
		}
		st[i] = int16(s)
	}
	rows, err := l.e.c.blocks.Items(ctx, l.ID, st)
	if err != nil {
		return nil, err
	}
	out := make([]*ListItem, len(rows))
	for i, r := range rows {
		it := &ListItem{N: r.N, Value: r.Value, Status: ItemStatus(r.Status), block: l.ID}
		if r.Reason != nil {
			it.Reason = *r.Reason
		}
		if r.Step != nil {
			it.Step = int(*r.Step)
		}
		out[i] = it
	}
	return out, nil
}

// Start marks the attempt started.
func (l *ListBlock) Start(ctx context.Context) error {
	l.e.startedBlocks.Store(true)
	if err := l.e.setBlockStatus(ctx, l.ID, l.Attempt, codes.BlockStarted, nil, 0, nil); err != nil {
		return err
	}
	l.trace.start(l.e.obs, BlockStart{ID: l.ID, Kind: KindList, Attempt: l.Attempt, Forced: l.Forced})
	return nil
}

// ItemCompleted records item as completed.
func (l *ListBlock) ItemCompleted(ctx context.Context, item *ListItem) error {
	return l.setItem(ctx, item, ItemCompleted, "", 0)
}

// ItemFailed records item as failed, with a reason and the step of the work it failed at (0:
// none); a later attempt of the block does it again.
func (l *ListBlock) ItemFailed(ctx context.Context, item *ListItem, reason string, step int) error {
	return l.setItem(ctx, item, ItemFailed, reason, step)
}

// ItemDiscarded records item as skipped for good (it counts as done), with a reason and step.
func (l *ListBlock) ItemDiscarded(ctx context.Context, item *ListItem, reason string, step int) error {
	return l.setItem(ctx, item, ItemDiscarded, reason, step)
}

func (l *ListBlock) setItem(ctx context.Context, item *ListItem, status ItemStatus, reason string, step int) error {
	if item == nil || item.block != l.ID || item.N < 1 || item.N > l.ItemCount {
		return fmt.Errorf("%w: item is not one of block %d's (take items from its Items)", ErrInvalidArgument, l.ID)
	}
	if step < 0 || step > 32767 {
		return fmt.Errorf("%w: step is %d; must be 0 (none) to 32767", ErrInvalidArgument, step)
	}
	u := blockstore.ItemUpdate{N: item.N, Status: int16(status)}
	if reason != "" {
		r := truncate(cleanText(reason))
		u.Reason = &r
	}
	if step > 0 {
		s := int16(step)
		u.Step = &s
	}
	if err := l.e.blockWrite(); err != nil {
		return err
	}
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return fmt.Errorf("taskling: block %d attempt %d: %w", l.ID, l.Attempt, ErrBlockLost)
	}
	l.pending = append(l.pending, u)
	flush := l.mode == CommitEachItem || (l.mode == CommitPeriodically && len(l.pending) >= l.batch)
	l.mu.Unlock()
	if err := func() error {
		if !flush {
			return nil
		}
		return l.Flush(ctx)
	}(); err != nil {
		return err
	}
	item.Status, item.Reason, item.Step = status, reason, step
	return nil
}

// Flush writes the item statuses not yet written, in one statement.
func (l *ListBlock) Flush(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flushLocked(ctx)
}

func (l *ListBlock) flushLocked(ctx context.Context) error {
	if len(l.pending) == 0 {
		return nil
	}
	if err := l.e.c.blocks.UpdateItems(ctx, l.ID, l.Attempt, l.pending); err != nil {
		if errors.Is(err, blockstore.ErrBlockLost) {
			l.pending = nil
		}
		return err
	}
	l.pending = nil
	return nil
}

// Complete writes the pending item statuses, then ends the attempt: Failed if any item is still
// pending or failed, else Completed.
func (l *ListBlock) Complete(ctx context.Context) error {
	return l.end(ctx, false, "")
}

// Fail writes the pending item statuses and marks the attempt failed with a message.
func (l *ListBlock) Fail(ctx context.Context, message string) error {
	return l.end(ctx, true, message)
}

func (l *ListBlock) end(ctx context.Context, failed bool, message string) error {
	if err := l.e.blockWrite(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.flushLocked(ctx); err != nil {
		return err
	}
	c, err := l.e.c.blocks.CountItems(ctx, l.ID)
	if err != nil {
		return err
	}
	if !failed && c.Pending+c.Failed > 0 {
		failed, message = true, fmt.Sprintf("%d items pending, %d failed", c.Pending, c.Failed)
	}
	status, done := codes.BlockCompleted, c.Completed+c.Discarded
	var msg *string
	if failed {
		status = codes.BlockFailed
		m := truncate(cleanText(message))
		msg = &m
	}
	err = l.e.c.blocks.SetBlockStatus(ctx, l.ID, l.Attempt, status, &done, 0, msg)
	if err == nil || errors.Is(err, blockstore.ErrBlockLost) {
		l.ended = true
		var why error
		if msg != nil {
			why = errors.New(*msg)
		} else if err != nil {
			why = err
		}
		l.trace.finish(why)
	}
	return err
}

// addLists remembers list blocks whose buffered statuses Complete must write.
func (e *Execution) addLists(ls []*ListBlock) {
	if len(ls) == 0 {
		return
	}
	e.mu.Lock()
	e.lists = append(e.lists, ls...)
	e.mu.Unlock()
}

// flushLists writes the buffered item statuses of the execution's list blocks (Complete does,
// before it returns the slot).
func (e *Execution) flushLists(ctx context.Context) error {
	e.mu.Lock()
	ls := e.lists
	e.lists = nil
	e.mu.Unlock()
	var errs []error
	for _, l := range ls {
		if err := l.Flush(ctx); err != nil && !errors.Is(err, blockstore.ErrBlockLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

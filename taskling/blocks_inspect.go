package taskling

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/execution"
)

// BlockStatus is a block's state, from its latest attempt: not_started, started, completed,
// failed, or dead (not ended, and its execution no longer runs).
type BlockStatus string

const (
	BlockNotStarted BlockStatus = "not_started"
	BlockStarted    BlockStatus = "started"
	BlockCompleted  BlockStatus = "completed"
	BlockFailed     BlockStatus = "failed"
	BlockDead       BlockStatus = "dead"
)

// BlockInfo is a block as operators see it (the CLI, the HTTP API, the dashboard).
type BlockInfo struct {
	ID         int64           `json:"id"`
	TaskID     int64           `json:"task_id"`
	Kind       string          `json:"kind"`
	FromNumber *int64          `json:"from_number,omitempty"`
	ToNumber   *int64          `json:"to_number,omitempty"`
	FromTime   *time.Time      `json:"from_time,omitempty"`
	ToTime     *time.Time      `json:"to_time,omitempty"`
	Value      json.RawMessage `json:"value,omitempty"`
	// ValueError says why Value is nil although the block has one: encoding/json cannot read
	// the stored value (nested deeper than 10 000, written with SQL).
	ValueError  string      `json:"value_error,omitempty"`
	ItemCount   int         `json:"item_count"`
	CreatedAt   time.Time   `json:"created_at"`
	Attempts    int         `json:"attempts"`
	Status      BlockStatus `json:"status"`
	ExecutionID int64       `json:"execution_id"`
	// ForcePending: an operator forced it and no execution has taken it yet.
	ForcePending bool `json:"force_pending"`
	// RetryLimit is the retry limit of the request that took its latest attempt (the larger of
	// its ReprocessFailed and ReprocessDead limits; 0 when it asked for neither). AtRetryLimit:
	// not completed, not running, and more attempts than that: under the same options no
	// execution takes it again (ForceBlock does).
	RetryLimit   int    `json:"retry_limit"`
	AtRetryLimit bool   `json:"at_retry_limit"`
	Message      string `json:"message,omitempty"`
}

// BlockAttemptInfo is one attempt of a block.
type BlockAttemptInfo struct {
	Attempt     int   `json:"attempt"`
	ExecutionID int64 `json:"execution_id"`
	// Status follows the block's rule: not_started, started, completed, failed, or dead (not
	// ended, and its execution no longer runs or a later attempt took the block). At most one
	// attempt of a block is not_started or started at a time.
	Status    BlockStatus `json:"status"`
	Forced    bool        `json:"forced"`
	CreatedAt time.Time   `json:"created_at"`
	StartedAt *time.Time  `json:"started_at,omitempty"`
	EndedAt   *time.Time  `json:"ended_at,omitempty"`
	// ItemsDone: what Complete was given; for a list block, its items completed or discarded
	// when the attempt ended.
	ItemsDone *int64 `json:"items_done,omitempty"`
	Message   string `json:"message,omitempty"`
}

var blockStatuses = map[int16]BlockStatus{execution.BlockNotStarted: BlockNotStarted, execution.BlockStarted: BlockStarted,
	execution.BlockCompleted: BlockCompleted, execution.BlockFailed: BlockFailed}

func blockInfoOf(r execution.BlockInfo) BlockInfo {
	b := BlockInfo{ID: r.ID, TaskID: r.TaskID, Kind: BlockKind(r.Kind).String(), FromNumber: r.FromNumber, ToNumber: r.ToNumber,
		FromTime: r.FromDate, ToTime: r.ToDate, ItemCount: r.ItemCount, CreatedAt: r.CreatedAt, Attempts: r.Attempt,
		Status: blockStatuses[r.Status], ExecutionID: r.ExecutionID, ForcePending: r.ForcePending, RetryLimit: r.RetryLimit,
		AtRetryLimit: r.AtRetryLimit}
	b.Value, b.ValueError = storedJSON(r.Value)
	if r.Dead {
		b.Status = BlockDead
	}
	if r.LatestMessage != nil {
		b.Message = *r.LatestMessage
	}
	return b
}

// Block returns one block, or an error wrapping ErrNotFound.
func (c *Client) Block(ctx context.Context, id int64) (BlockInfo, error) {
	row, ok, err := c.store.BlockByID(ctx, id)
	if err != nil {
		return BlockInfo{}, err
	}
	if !ok {
		return BlockInfo{}, notFound(fmt.Sprintf("block %d", id))
	}
	return blockInfoOf(row), nil
}

// ExecutionBlocks lists the blocks an execution attempted (their state now), by id.
func (c *Client) ExecutionBlocks(ctx context.Context, executionID int64) ([]BlockInfo, error) {
	rows, err := c.store.ExecutionBlocks(ctx, executionID)
	if err != nil {
		return nil, err
	}
	return blockInfos(rows), nil
}

// TaskBlocksFilter selects a task's blocks. A nil *TaskBlocksFilter means the newest 100.
type TaskBlocksFilter struct {
	// AtRetryLimit keeps the blocks at their retry limit (BlockInfo.AtRetryLimit).
	AtRetryLimit bool
	// Limit is at most 1000; 0 means 100.
	Limit int
}

// TaskBlocks lists the blocks of app/task, newest first; an unknown task has none.
func (c *Client) TaskBlocks(ctx context.Context, app, task string, filter *TaskBlocksFilter) ([]BlockInfo, error) {
	if err := validateTask(app, task); err != nil {
		return nil, err
	}
	f := TaskBlocksFilter{}
	if filter != nil {
		f = *filter
	}
	switch {
	case f.Limit == 0:
		f.Limit = 100
	case f.Limit < 0 || f.Limit > 1000:
		return nil, fmt.Errorf("%w: TaskBlocksFilter.Limit is %d; want 1 to 1000 (0: 100)", ErrInvalidArgument, f.Limit)
	}
	id, ok, err := c.store.FindTask(ctx, app, task)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.store.TaskBlocks(ctx, id, execution.TaskBlocksFilter{AtLimit: f.AtRetryLimit, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	return blockInfos(rows), nil
}

func blockInfos(rows []execution.BlockInfo) []BlockInfo {
	out := make([]BlockInfo, len(rows))
	for i, r := range rows {
		out[i] = blockInfoOf(r)
	}
	return out
}

// BlockAttempts lists a block's attempts, first first, or an error wrapping ErrNotFound.
func (c *Client) BlockAttempts(ctx context.Context, id int64) ([]BlockAttemptInfo, error) {
	rows, err := c.store.BlockAttempts(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, notFound(fmt.Sprintf("block %d", id))
	}
	out := make([]BlockAttemptInfo, len(rows))
	for i, r := range rows {
		out[i] = BlockAttemptInfo{Attempt: r.Attempt, ExecutionID: r.ExecutionID, Status: blockStatuses[r.Status], Forced: r.Forced,
			CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, EndedAt: r.EndedAt, ItemsDone: r.ItemsDone}
		if r.Dead {
			out[i].Status = BlockDead
		}
		if r.Message != nil {
			out[i].Message = *r.Message
		}
	}
	return out, nil
}

// ForceBlock asks that block id run again (see Operations.ForceBlock), recorded as made by the
// operator named forcedBy, which is required.
//
// Deprecated: use c.As(Operator{Name: forcedBy}).ForceBlock(ctx, id), which records the same
// (and, with an empty Name, records "library@" and this client's host name).
func (c *Client) ForceBlock(ctx context.Context, id int64, forcedBy string) error {
	if forcedBy == "" {
		return fmt.Errorf("%w: ForceBlock: forcedBy is empty", ErrInvalidArgument)
	}
	o, err := c.asBy("ForceBlock: forcedBy", forcedBy)
	if err != nil {
		return err
	}
	return o.ForceBlock(ctx, id)
}

// BlockCount is how many blocks of a task are in one status, and how many of those are at their
// retry limit.
type BlockCount struct {
	Application, Task string
	Status            BlockStatus
	Blocks            int64
	AtRetryLimit      int64
}

// BlockCounts counts every task's blocks by status, on the database clock (for metrics).
func (c *Client) BlockCounts(ctx context.Context) ([]BlockCount, error) {
	rows, err := c.store.BlockCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]BlockCount, len(rows))
	for i, r := range rows {
		out[i] = BlockCount{Application: r.Application, Task: r.Task, Status: BlockStatus(r.Status), Blocks: r.Blocks, AtRetryLimit: r.AtRetryLimit}
	}
	return out, nil
}

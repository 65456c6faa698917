package taskling

import (
	"context"
	"fmt"

	"github.com/taskling-go/taskling/internal/store/blockstore"
)

// Block returns one block, or an error wrapping ErrNotFound.
func (c *Client) Block(ctx context.Context, id int64) (_ BlockInfo, err error) {
	defer wrapErr(&err, "block %d", id)
	row, ok, err := c.blocks.BlockByID(ctx, id)
	if err != nil {
		return BlockInfo{}, err
	}
	if !ok {
		return BlockInfo{}, notFound(fmt.Sprintf("block %d", id))
	}
	return row, nil
}

// ExecutionBlocks lists the blocks an execution attempted (their state now), by id.
func (c *Client) ExecutionBlocks(ctx context.Context, executionID int64) (_ []BlockInfo, err error) {
	defer wrapErr(&err, "blocks of execution %d", executionID)
	return c.blocks.ExecutionBlocks(ctx, executionID)
}

// TaskBlocksFilter selects a task's blocks. A nil *TaskBlocksFilter means the newest 100.
type TaskBlocksFilter struct {
	// AtRetryLimit keeps the blocks at their retry limit (BlockInfo.AtRetryLimit).
	AtRetryLimit bool
	// Limit is at most 1000; 0 means 100.
	Limit int
}

// TaskBlocks lists the blocks of app/task, newest first; an unknown task has none.
func (c *Client) TaskBlocks(ctx context.Context, app, task string, filter *TaskBlocksFilter) (_ []BlockInfo, err error) {
	defer wrapErr(&err, "blocks of %s/%s", app, task)
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
	return c.blocks.TaskBlocks(ctx, id, blockstore.TaskBlocksFilter{AtLimit: f.AtRetryLimit, Limit: f.Limit})
}

// BlockAttempts lists a block's attempts, first first, or an error wrapping ErrNotFound.
func (c *Client) BlockAttempts(ctx context.Context, id int64) (_ []BlockAttemptInfo, err error) {
	defer wrapErr(&err, "attempts of block %d", id)
	rows, err := c.blocks.BlockAttempts(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, notFound(fmt.Sprintf("block %d", id))
	}
	return rows, nil
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

// BlockCounts counts every task's blocks by status, on the database clock (for metrics).
func (c *Client) BlockCounts(ctx context.Context) (_ []BlockCount, err error) {
	defer wrapErr(&err, "count blocks")
	return c.blocks.BlockCounts(ctx)
}

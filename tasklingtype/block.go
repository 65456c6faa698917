package tasklingtype

import (
	"encoding/json"
	"time"
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

// BlockCount is how many blocks of a task are in one status, and how many of those are at their
// retry limit.
type BlockCount struct {
	Application, Task string
	Status            BlockStatus
	Blocks            int64
	AtRetryLimit      int64
}

package execution

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"
)

// statusSQL derives the status of execution e: in_progress, completed, failed, blocked or dead
// (taskling.Status's values). A reclaimed execution is dead even if it later completed: its slot
// was given to another while it may have been running.
var statusSQL = `(CASE
    WHEN e.blocked THEN 'blocked'
    WHEN e.reclaimed_at IS NOT NULL THEN 'dead'
    WHEN e.completed_at IS NOT NULL AND e.failed THEN 'failed'
    WHEN e.completed_at IS NOT NULL THEN 'completed'
    WHEN ` + aliveSQL + ` THEN 'in_progress'
    ELSE 'dead' END)`

// ExecutionRow is one execution as the history queries return it.
type ExecutionRow struct {
	ID             int64           `db:"id"`
	TaskID         int64           `db:"task_id"`
	Status         string          `db:"status"`
	StartedAt      time.Time       `db:"started_at"`
	CompletedAt    *time.Time      `db:"completed_at"`
	LastKeepAlive  time.Time       `db:"last_keep_alive"`
	Host           string          `db:"host_name"`
	ReferenceValue *string         `db:"reference_value"`
	Header         json.RawMessage `db:"header"`
	Failed         bool            `db:"failed"`
	Blocked        bool            `db:"blocked"`
	BlockedReason  *string         `db:"blocked_reason"`
	Fence          *int64          `db:"fence"`
	ItemsDone      *int64          `db:"items_done"`
	ItemsTotal     *int64          `db:"items_total"`
	ScheduledFor   *time.Time      `db:"scheduled_for"`
	ReclaimedAt    *time.Time      `db:"reclaimed_at"`
	LibraryVersion string          `db:"library_version"`
}

var executionColumns = `e.id, e.task_id, ` + statusSQL + ` AS status, e.started_at, e.completed_at,
    e.last_keep_alive, e.host_name, e.reference_value, e.header, e.failed, e.blocked,
    e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for, e.reclaimed_at,
    e.library_version`

// lastExecutionsSQL is served by task_execution_task_id_idx (task_id, id DESC).
var lastExecutionsSQL = `
SELECT ` + executionColumns + `
FROM taskling.task_execution e
WHERE e.task_id = $1
ORDER BY e.id DESC
LIMIT $2`

// LastExecutions returns the task's last n executions, newest first.
func (s *Store) LastExecutions(ctx context.Context, taskID int64, n int) ([]ExecutionRow, error) {
	var out []ExecutionRow
	if err := pgxscan.Select(ctx, s.pool, &out, lastExecutionsSQL, taskID, n); err != nil {
		return nil, fmt.Errorf("execution: last executions of task %d: %w", taskID, err)
	}
	return out, nil
}

var executionSQL = `SELECT ` + executionColumns + `, d.application_name, d.task_name
FROM taskling.task_execution e JOIN taskling.task_definition d ON d.id = e.task_id
WHERE e.id = $1`

// ExecutionOfTask is an execution with the names of its task.
type ExecutionOfTask struct {
	ExecutionRow
	Application string `db:"application_name"`
	Task        string `db:"task_name"`
}

// Execution returns one execution, or ok=false if there is none with that id.
func (s *Store) Execution(ctx context.Context, id int64) (row ExecutionOfTask, ok bool, err error) {
	var out []ExecutionOfTask
	if err := pgxscan.Select(ctx, s.pool, &out, executionSQL, id); err != nil {
		return row, false, fmt.Errorf("execution: execution %d: %w", id, err)
	}
	if len(out) == 0 {
		return row, false, nil
	}
	return out[0], true, nil
}

// Event is one event of an execution.
type Event struct {
	// Type is start, checkpoint, error, end or blocked (taskling.EventType's values).
	Type       string
	Message    string
	OccurredAt time.Time
}

// Events returns an execution's events in the order they happened.
func (s *Store) Events(ctx context.Context, executionID int64) ([]Event, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT event_type, coalesce(message, ''), occurred_at FROM taskling.task_execution_event WHERE execution_id = $1 ORDER BY id`, executionID)
	if err != nil {
		return nil, fmt.Errorf("execution: events of execution %d: %w", executionID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		var code int16
		err := row.Scan(&code, &e.Message, &e.OccurredAt)
		e.Type = eventNames[code]
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("execution: events of execution %d: %w", executionID, err)
	}
	return out, nil
}

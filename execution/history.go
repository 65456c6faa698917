package execution

import (
	"context"
	"fmt"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"
)

// executionFrom joins an execution (e) with its end (x) and its session (s).
const executionFrom = `taskling.task_execution e
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id`

// statusSQL derives the status of execution e (executionFrom): in_progress, completed, failed,
// blocked or dead (taskling.Status's values). A reclaimed execution is dead even if it later
// completed: its slot was given to another while it may have been running.
var statusSQL = fmt.Sprintf(`(CASE
    WHEN e.blocked THEN 'blocked'
    WHEN e.reclaimed_at IS NOT NULL OR x.outcome = %d THEN 'dead'
    WHEN x.outcome = %d OR (x.outcome IS NOT NULL AND e.failed) THEN 'failed'
    WHEN x.outcome IS NOT NULL THEN 'completed'
    WHEN e.completed_at IS NOT NULL AND e.failed THEN 'failed'
    WHEN e.completed_at IS NOT NULL THEN 'completed'
    WHEN `+aliveSQL+` THEN 'in_progress'
    ELSE 'dead' END)`, endReclaimed, endFailed)

// Columns of an execution's end and liveness, for executionFrom.
var (
	completedAtSQL   = fmt.Sprintf(`(CASE WHEN e.blocked THEN e.completed_at WHEN x.outcome IN (%d, %d) THEN x.ended_at ELSE e.completed_at END)`, endCompleted, endFailed)
	lastHeartbeatSQL = `(CASE WHEN x.execution_id IS NOT NULL THEN coalesce(x.last_heartbeat, e.last_keep_alive)
        WHEN e.session_id IS NOT NULL THEN greatest(e.started_at, s.last_heartbeat) ELSE e.last_keep_alive END)`
	reclaimedAtSQL = fmt.Sprintf(`coalesce(e.reclaimed_at, CASE WHEN x.outcome = %d THEN x.ended_at END)`, endReclaimed)
)

// ExecutionRow is one execution as the history queries return it.
type ExecutionRow struct {
	ID             int64      `db:"id"`
	TaskID         int64      `db:"task_id"`
	Status         string     `db:"status"`
	StartedAt      time.Time  `db:"started_at"`
	CompletedAt    *time.Time `db:"completed_at"`
	LastKeepAlive  time.Time  `db:"last_keep_alive"`
	Host           string     `db:"host_name"`
	ReferenceValue *string    `db:"reference_value"`
	Header         []byte     `db:"header"` // jsonb's text as is (a json.RawMessage would be parsed)
	Failed         bool       `db:"failed"`
	Blocked        bool       `db:"blocked"`
	BlockedReason  *string    `db:"blocked_reason"`
	Fence          *int64     `db:"fence"`
	ItemsDone      *int64     `db:"items_done"`
	ItemsTotal     *int64     `db:"items_total"`
	ScheduledFor   *time.Time `db:"scheduled_for"`
	ReclaimedAt    *time.Time `db:"reclaimed_at"`
	LibraryVersion string     `db:"library_version"`
}

var executionColumns = `e.id, e.task_id, ` + statusSQL + ` AS status, e.started_at, ` + completedAtSQL + ` AS completed_at,
    ` + lastHeartbeatSQL + ` AS last_keep_alive, e.host_name, e.reference_value, e.header,
    e.failed OR coalesce(x.outcome = ` + fmt.Sprint(endFailed) + `, false) AS failed, e.blocked,
    e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for, ` + reclaimedAtSQL + ` AS reclaimed_at,
    e.library_version`

// lastExecutionsSQL is served by task_execution_task_started_idx (task_id, started_at DESC, id DESC).
var lastExecutionsSQL = `
SELECT ` + executionColumns + `
FROM ` + executionFrom + `
WHERE e.task_id = $1
ORDER BY e.started_at DESC, e.id DESC
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
FROM ` + executionFrom + ` JOIN taskling.task_definition d ON d.id = e.task_id
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

// eventsSQL returns an execution's events in order: the stored ones (checkpoints and errors;
// and, for executions of protocol 1, their start, blocked and end events) and, for the others,
// the start, blocked and end their row and end record say. (Those are not stored twice.)
var eventsSQL = fmt.Sprintf(`
WITH ex AS (
    SELECT e.id, e.started_at, e.blocked, e.blocked_reason, e.completed_at, x.ended_at, x.outcome,
           NOT EXISTS (SELECT 1 FROM taskling.task_execution_event v
                       WHERE v.execution_id = e.id AND v.event_type IN (%[1]d, %[2]d, %[3]d)) AS derived
    FROM taskling.task_execution e LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    WHERE e.id = $1
)
SELECT type, message, at FROM (
    SELECT event_type AS type, coalesce(message, '') AS message, occurred_at AS at, id AS ord
    FROM taskling.task_execution_event WHERE execution_id = $1
    UNION ALL SELECT %[1]d, '', started_at, -3 FROM ex WHERE derived
    UNION ALL SELECT %[2]d, coalesce(blocked_reason, ''), started_at, -2 FROM ex WHERE derived AND blocked
    UNION ALL SELECT %[3]d, CASE outcome WHEN %[4]d THEN 'slot reclaimed: judged dead on the database clock' ELSE '' END,
                     coalesce(ended_at, completed_at), 9223372036854775807
              FROM ex WHERE derived AND coalesce(ended_at, completed_at) IS NOT NULL
) v
ORDER BY at, ord`, eventStart, eventBlocked, eventEnd, endReclaimed)

// Events returns an execution's events in the order they happened.
func (s *Store) Events(ctx context.Context, executionID int64) ([]Event, error) {
	rows, err := s.pool.Query(ctx, eventsSQL, executionID)
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

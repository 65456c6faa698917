package historystore

import (
	"context"
	"fmt"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/internal/codes"
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

// lastExecutionsSQL is served by task_execution_task_started_idx (task_id, started_at DESC, id DESC).
const lastExecutionsSQL = `
SELECT e.id, e.task_id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at,
    taskling.execution_completed_at(e, x) AS completed_at,
    taskling.execution_last_heartbeat(e, x, s.last_heartbeat) AS last_keep_alive, e.host_name, e.reference_value,
    e.header, e.failed OR coalesce(x.outcome = taskling.end_outcome('failed'), false) AS failed, e.blocked,
    e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for,
    taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.library_version
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE e.task_id = $1
ORDER BY e.started_at DESC, e.id DESC
LIMIT $2`

// LastExecutions returns the task's last n executions, newest first.
func (s *Store) LastExecutions(ctx context.Context, taskID int64, n int) ([]ExecutionRow, error) {
	var out []ExecutionRow
	if err := pgxscan.Select(ctx, s.db, &out, lastExecutionsSQL, taskID, n); err != nil {
		return nil, fmt.Errorf("last executions of task %d: %w", taskID, err)
	}
	return out, nil
}

const executionSQL = `
SELECT e.id, e.task_id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at,
    taskling.execution_completed_at(e, x) AS completed_at,
    taskling.execution_last_heartbeat(e, x, s.last_heartbeat) AS last_keep_alive, e.host_name, e.reference_value,
    e.header, e.failed OR coalesce(x.outcome = taskling.end_outcome('failed'), false) AS failed, e.blocked,
    e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for,
    taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.library_version,
    d.application_name, d.task_name
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
JOIN taskling.task_definition d ON d.id = e.task_id
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
	if err := pgxscan.Select(ctx, s.db, &out, executionSQL, id); err != nil {
		return row, false, fmt.Errorf("execution %d: %w", id, err)
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
const eventsSQL = `
WITH ex AS (
    SELECT e.id, e.started_at, e.blocked, e.blocked_reason, e.completed_at, x.ended_at, x.outcome,
           NOT EXISTS (SELECT 1 FROM taskling.task_execution_event v
                       WHERE v.execution_id = e.id
                         AND v.event_type IN (taskling.event_type('start'), taskling.event_type('blocked'), taskling.event_type('end'))) AS derived
    FROM taskling.task_execution e LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    WHERE e.id = $1
)
SELECT type, message, at FROM (
    SELECT event_type AS type, coalesce(message, '') AS message, occurred_at AS at, id AS ord
    FROM taskling.task_execution_event WHERE execution_id = $1
    UNION ALL SELECT taskling.event_type('start'), '', started_at, -3 FROM ex WHERE derived
    UNION ALL SELECT taskling.event_type('blocked'), coalesce(blocked_reason, ''), started_at, -2 FROM ex WHERE derived AND blocked
    UNION ALL SELECT taskling.event_type('end'),
                     CASE WHEN outcome = taskling.end_outcome('reclaimed') THEN 'slot reclaimed: judged dead on the database clock' ELSE '' END,
                     coalesce(ended_at, completed_at), 9223372036854775807
              FROM ex WHERE derived AND coalesce(ended_at, completed_at) IS NOT NULL
) v
ORDER BY at, ord`

// Events returns an execution's events in the order they happened.
func (s *Store) Events(ctx context.Context, executionID int64) ([]Event, error) {
	rows, err := s.db.Query(ctx, eventsSQL, executionID)
	if err != nil {
		return nil, fmt.Errorf("events of execution %d: %w", executionID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		var code int16
		err := row.Scan(&code, &e.Message, &e.OccurredAt)
		e.Type = codes.Name("event_type", code)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("events of execution %d: %w", executionID, err)
	}
	return out, nil
}

// scheduledExecutionsSQL reads task $1's executions with scheduled_for in [$2, $3], oldest instant
// first (served by task_execution_scheduled_for_key).
const scheduledExecutionsSQL = `
SELECT e.id, e.task_id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at,
    taskling.execution_completed_at(e, x) AS completed_at,
    taskling.execution_last_heartbeat(e, x, s.last_heartbeat) AS last_keep_alive, e.host_name, e.reference_value,
    e.header, e.failed OR coalesce(x.outcome = taskling.end_outcome('failed'), false) AS failed, e.blocked,
    e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for,
    taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.library_version
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE e.task_id = $1 AND e.scheduled_for BETWEEN $2 AND $3
ORDER BY e.scheduled_for`

// ScheduledExecutions returns a task's executions with scheduled_for in [from, to], oldest
// instant first.
func (s *Store) ScheduledExecutions(ctx context.Context, taskID int64, from, to time.Time) ([]ExecutionRow, error) {
	var out []ExecutionRow
	if err := pgxscan.Select(ctx, s.db, &out, scheduledExecutionsSQL, taskID, from, to); err != nil {
		return nil, fmt.Errorf("scheduled executions of task %d: %w", taskID, err)
	}
	return out, nil
}

// ExecutionsQuery selects a page of a task's executions, newest first.
type ExecutionsQuery struct {
	TaskID int64
	// Status keeps only executions with this derived status ("" = all).
	Status string
	// BeforeID keeps only executions with a smaller id (0 = from the newest): pass the previous
	// page's last id to get the next page.
	BeforeID int64
	Limit    int
}

// executionsPageSQL walks task_execution_task_started_idx (task_id, started_at DESC, id DESC)
// from the cursor (the execution $2, a page's last); the status filter is applied to the rows it
// walks, since the status is derived.
const executionsPageSQL = `
SELECT * FROM (
    SELECT e.id, e.task_id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at,
        taskling.execution_completed_at(e, x) AS completed_at,
        taskling.execution_last_heartbeat(e, x, s.last_heartbeat) AS last_keep_alive, e.host_name, e.reference_value,
        e.header, e.failed OR coalesce(x.outcome = taskling.end_outcome('failed'), false) AS failed, e.blocked,
        e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for,
        taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.library_version
    FROM taskling.task_execution e
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id
    WHERE e.task_id = $1 AND ($2 = 0 OR (e.started_at, e.id) <
        (SELECT c.started_at, c.id FROM taskling.task_execution c WHERE c.id = $2))
) page
WHERE ($3 = '' OR page.status = $3)
ORDER BY page.started_at DESC, page.id DESC
LIMIT $4`

// Executions returns a page of a task's executions, newest first, and whether more follow.
func (s *Store) Executions(ctx context.Context, q ExecutionsQuery) (rows []ExecutionRow, more bool, err error) {
	if q.Limit < 1 {
		return nil, false, fmt.Errorf("executions page limit is %d; want at least 1", q.Limit)
	}
	if err := pgxscan.Select(ctx, s.db, &rows, executionsPageSQL, q.TaskID, q.BeforeID, q.Status, q.Limit+1); err != nil {
		return nil, false, fmt.Errorf("executions of task %d: %w", q.TaskID, err)
	}
	if len(rows) > q.Limit {
		return rows[:q.Limit], true, nil
	}
	return rows, false, nil
}

package historystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype/zeronull"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/storedjson"
	"github.com/taskling-go/taskling/tasklingtype"
)

// The execution reads list an execution's columns in scanExecution's order; the submission
// attempt an execution ran, if any, is found by submission_attempt's unique execution_id.

// scanExecution scans an execution's columns, then into more the columns after them. NULL reads
// as the zero value (zeronull), as tasklingtype.ExecutionInfo documents it.
func scanExecution(row pgx.Row, more ...any) (tasklingtype.ExecutionInfo, error) {
	var x tasklingtype.ExecutionInfo
	var header []byte // jsonb's text as is (a json.RawMessage would be parsed)
	var attempt int32
	err := row.Scan(append([]any{&x.ID, &x.Status, &x.StartedAt, (*zeronull.Timestamptz)(&x.CompletedAt), &x.LastHeartbeat,
		&x.Host, (*zeronull.Text)(&x.ReferenceValue), &header, (*zeronull.Text)(&x.BlockedReason),
		(*zeronull.Int8)(&x.FencingToken), (*zeronull.Int8)(&x.ItemsDone), (*zeronull.Int8)(&x.ItemsTotal),
		(*zeronull.Timestamptz)(&x.ScheduledFor), (*zeronull.Timestamptz)(&x.ReclaimedAt), &x.LibraryVersion, &x.Key, &x.Cost,
		(*zeronull.Int8)(&x.SubmissionID), (*zeronull.Int4)(&attempt)}, more...)...)
	x.Attempt = int(attempt)
	x.Header, x.HeaderError = storedjson.Read(header)
	return x, err
}

func collectExecution(row pgx.CollectableRow) (tasklingtype.ExecutionInfo, error) {
	return scanExecution(row)
}

// LastExecutions returns the task's last n executions, newest first.
func (s *Store) LastExecutions(ctx context.Context, taskID int64, n int) ([]tasklingtype.ExecutionInfo, error) {
	out, err := s.executions(ctx, executionsPageSQL, taskID, 0, "", n) // the first page
	if err != nil {
		return nil, fmt.Errorf("last executions of task %d: %w", taskID, err)
	}
	return out, nil
}

// executions runs an execution read.
func (s *Store) executions(ctx context.Context, sql string, args ...any) ([]tasklingtype.ExecutionInfo, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, collectExecution)
}

const executionSQL = `
SELECT e.id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at,
    taskling.execution_completed_at(e, x) AS completed_at,
    taskling.execution_last_heartbeat(e, x, s.last_heartbeat) AS last_keep_alive, e.host_name, e.reference_value,
    e.header, e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for,
    taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.library_version, e.key, e.cost, a.submission_id, a.attempt,
    d.application_name, d.task_name
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
LEFT JOIN taskling.submission_attempt a ON a.execution_id = e.id
JOIN taskling.task_definition d ON d.id = e.task_id
WHERE e.id = $1`

// Execution returns one execution with the names of its task (without its events), or ok=false
// if there is none with that id.
func (s *Store) Execution(ctx context.Context, id int64) (d tasklingtype.ExecutionDetail, ok bool, err error) {
	d.ExecutionInfo, err = scanExecution(s.db.QueryRow(ctx, executionSQL, id), &d.Application, &d.Task)
	if errors.Is(err, pgx.ErrNoRows) {
		return tasklingtype.ExecutionDetail{}, false, nil
	}
	if err != nil {
		return tasklingtype.ExecutionDetail{}, false, fmt.Errorf("execution %d: %w", id, err)
	}
	return d, true, nil
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
func (s *Store) Events(ctx context.Context, executionID int64) ([]tasklingtype.ExecutionEvent, error) {
	rows, err := s.db.Query(ctx, eventsSQL, executionID)
	if err != nil {
		return nil, fmt.Errorf("events of execution %d: %w", executionID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.ExecutionEvent, error) {
		var e tasklingtype.ExecutionEvent
		var code int16
		err := row.Scan(&code, &e.Message, &e.OccurredAt)
		e.Type = tasklingtype.EventType(codes.Name("event_type", code))
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
SELECT e.id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at,
    taskling.execution_completed_at(e, x) AS completed_at,
    taskling.execution_last_heartbeat(e, x, s.last_heartbeat) AS last_keep_alive, e.host_name, e.reference_value,
    e.header, e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for,
    taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.library_version, e.key, e.cost, a.submission_id, a.attempt
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
LEFT JOIN taskling.submission_attempt a ON a.execution_id = e.id
WHERE e.task_id = $1 AND e.scheduled_for BETWEEN $2 AND $3
ORDER BY e.scheduled_for`

// ScheduledExecutions returns a task's executions with scheduled_for in [from, to], oldest
// instant first.
func (s *Store) ScheduledExecutions(ctx context.Context, taskID int64, from, to time.Time) ([]tasklingtype.ExecutionInfo, error) {
	out, err := s.executions(ctx, scheduledExecutionsSQL, taskID, from, to)
	if err != nil {
		return nil, fmt.Errorf("scheduled executions of task %d: %w", taskID, err)
	}
	return out, nil
}

// ExecutionsQuery selects a page of a task's executions, newest first.
type ExecutionsQuery struct {
	TaskID int64
	// Status keeps only executions with this derived status ("" = all).
	Status string
	// BeforeID continues after this execution, in start order (0 = from the newest): pass the
	// previous page's last id to get the next page. If it no longer exists, the page is empty.
	BeforeID int64
	Limit    int
}

// executionsPageSQL walks task_execution_task_started_idx (task_id, started_at DESC, id DESC) in
// order from the cursor (the execution $2, a page's last; 0: from the newest) and stops at $4
// rows; the status filter is applied to the rows it walks, since the status is derived. The
// cursor is a row comparison against one row, not an OR: PostgreSQL then reads the index in order
// under a generic plan too (with an OR, or a subquery it cannot flatten, it sorted every older
// execution of the task: ~1 s a page at 1.5 M executions).
const executionsPageSQL = `
SELECT e.id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at,
    taskling.execution_completed_at(e, x) AS completed_at,
    taskling.execution_last_heartbeat(e, x, s.last_heartbeat) AS last_keep_alive, e.host_name, e.reference_value,
    e.header, e.blocked_reason, e.fence, e.items_done, e.items_total, e.scheduled_for,
    taskling.execution_reclaimed_at(e, x) AS reclaimed_at, e.library_version, e.key, e.cost, a.submission_id, a.attempt
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
LEFT JOIN taskling.submission_attempt a ON a.execution_id = e.id
WHERE e.task_id = $1
    AND (e.started_at, e.id) < (SELECT c.started_at, c.id FROM taskling.task_execution c WHERE c.id = $2
                                UNION ALL SELECT 'infinity'::timestamptz, 0 WHERE $2 = 0)
    AND ($3 = '' OR taskling.execution_status(e, x, s.last_heartbeat) = $3)
ORDER BY e.started_at DESC, e.id DESC
LIMIT $4`

// Executions returns a page of a task's executions, newest first, and whether more follow.
func (s *Store) Executions(ctx context.Context, q ExecutionsQuery) (rows []tasklingtype.ExecutionInfo, more bool, err error) {
	if q.Limit < 1 {
		return nil, false, fmt.Errorf("executions page limit is %d; want at least 1", q.Limit)
	}
	if rows, err = s.executions(ctx, executionsPageSQL, q.TaskID, q.BeforeID, q.Status, q.Limit+1); err != nil {
		return nil, false, fmt.Errorf("executions of task %d: %w", q.TaskID, err)
	}
	if len(rows) > q.Limit {
		return rows[:q.Limit], true, nil
	}
	return rows, false, nil
}

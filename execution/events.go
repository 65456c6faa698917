package execution

import (
	"context"
	"fmt"
)

// Event types stored in task_execution_event.event_type, and their names (taskling.EventType's
// values). Start, Blocked and End are stored only by executions of protocol 1; Events derives
// them for the others.
const (
	eventStart      int16 = 1
	eventCheckpoint int16 = 2
	eventError      int16 = 3
	eventEnd        int16 = 4
	eventBlocked    int16 = 5
)

var eventNames = map[int16]string{eventStart: "start", eventCheckpoint: "checkpoint", eventError: "error", eventEnd: "end", eventBlocked: "blocked"}

var checkpointSQL = fmt.Sprintf(`
INSERT INTO taskling.task_execution_event (execution_id, event_type, message) VALUES ($1, %d, $2)`, eventCheckpoint)

// Checkpoint records a Checkpoint event of an execution.
func (s *Store) Checkpoint(ctx context.Context, executionID int64, message string) error {
	if _, err := s.pool.Exec(ctx, checkpointSQL, executionID, message); err != nil {
		return fmt.Errorf("execution: record checkpoint of execution %d: %w", executionID, err)
	}
	return nil
}

// recordErrorSQL records an Error event; a failure mark ($3) also becomes the last error of the
// submission whose attempt the execution runs (submission_running_idx), since its end will
// settle that attempt as failed.
var recordErrorSQL = fmt.Sprintf(`
WITH u AS (UPDATE taskling.task_execution SET failed = failed OR $3 WHERE id = $1),
s AS (UPDATE taskling.submission SET last_error = $2, updated_at = clock_timestamp() WHERE $3 AND execution_id = $1 AND status = 2)
INSERT INTO taskling.task_execution_event (execution_id, event_type, message) VALUES ($1, %d, $2)`, eventError)

// RecordError records an Error event, and marks the execution failed if failed is true (the
// running attempt of its submission, if any, then has message as its last error).
func (s *Store) RecordError(ctx context.Context, executionID int64, message string, failed bool) error {
	if _, err := s.pool.Exec(ctx, recordErrorSQL, executionID, message, failed); err != nil {
		return fmt.Errorf("execution: record error of execution %d: %w", executionID, err)
	}
	return nil
}

const setProgressSQL = `UPDATE taskling.task_execution SET items_done = $2, items_total = $3 WHERE id = $1`

// SetProgress stores items done and total of an execution.
func (s *Store) SetProgress(ctx context.Context, executionID, done, total int64) error {
	if _, err := s.pool.Exec(ctx, setProgressSQL, executionID, done, total); err != nil {
		return fmt.Errorf("execution: set progress of execution %d: %w", executionID, err)
	}
	return nil
}

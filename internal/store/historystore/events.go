package historystore

import (
	"context"
	"fmt"
)

const checkpointSQL = `
INSERT INTO taskling.task_execution_event (execution_id, event_type, message)
VALUES ($1, taskling.event_type('checkpoint'), $2)`

// Checkpoint records a Checkpoint event of an execution.
func (s *Store) Checkpoint(ctx context.Context, executionID int64, message string) error {
	if _, err := s.db.Exec(ctx, checkpointSQL, executionID, message); err != nil {
		return fmt.Errorf("record checkpoint of execution %d: %w", executionID, err)
	}
	return nil
}

// recordErrorSQL records an Error event; a failure mark ($3) also becomes the last error of the
// submission whose attempt the execution runs (submission_running_idx), since its end will
// settle that attempt as failed.
const recordErrorSQL = `
WITH u AS (UPDATE taskling.task_execution SET failed = failed OR $3 WHERE id = $1),
s AS (
    UPDATE taskling.submission SET last_error = $2, updated_at = clock_timestamp()
    WHERE $3 AND execution_id = $1 AND status = taskling.submission_status('in_progress')
)
INSERT INTO taskling.task_execution_event (execution_id, event_type, message)
VALUES ($1, taskling.event_type('error'), $2)`

// RecordError records an Error event, and marks the execution failed if failed is true (the
// running attempt of its submission, if any, then has message as its last error).
func (s *Store) RecordError(ctx context.Context, executionID int64, message string, failed bool) error {
	if _, err := s.db.Exec(ctx, recordErrorSQL, executionID, message, failed); err != nil {
		return fmt.Errorf("record error of execution %d: %w", executionID, err)
	}
	return nil
}

const setProgressSQL = `UPDATE taskling.task_execution SET items_done = $2, items_total = $3 WHERE id = $1`

// SetProgress stores items done and total of an execution.
func (s *Store) SetProgress(ctx context.Context, executionID, done, total int64) error {
	if _, err := s.db.Exec(ctx, setProgressSQL, executionID, done, total); err != nil {
		return fmt.Errorf("set progress of execution %d: %w", executionID, err)
	}
	return nil
}

package execution

import (
	"context"
	"fmt"
)

// heartbeatSQL renews the lease on the DB clock. Identity-checked by the row itself: a completed
// or reclaimed execution cannot renew (a reclaim in progress holds the row lock, so this waits
// and then sees it).
const heartbeatSQL = `
UPDATE taskling.task_execution SET last_keep_alive = clock_timestamp()
WHERE id = $1 AND completed_at IS NULL AND reclaimed_at IS NULL`

// Heartbeat renews an execution's lease. held=false means the execution was reclaimed or has
// completed: it must stop.
func (s *Store) Heartbeat(ctx context.Context, executionID int64) (held bool, err error) {
	tag, err := s.pool.Exec(ctx, heartbeatSQL, executionID)
	if err != nil {
		return false, fmt.Errorf("execution: heartbeat of execution %d: %w", executionID, err)
	}
	return tag.RowsAffected() == 1, nil
}

var checkpointSQL = fmt.Sprintf(`
INSERT INTO taskling.task_execution_event (execution_id, event_type, message) VALUES ($1, %d, $2)`, eventCheckpoint)

// Checkpoint records a Checkpoint event of an execution.
func (s *Store) Checkpoint(ctx context.Context, executionID int64, message string) error {
	if _, err := s.pool.Exec(ctx, checkpointSQL, executionID, message); err != nil {
		return fmt.Errorf("execution: record checkpoint of execution %d: %w", executionID, err)
	}
	return nil
}

var recordErrorSQL = fmt.Sprintf(`
WITH u AS (UPDATE taskling.task_execution SET failed = failed OR $3 WHERE id = $1)
INSERT INTO taskling.task_execution_event (execution_id, event_type, message) VALUES ($1, %d, $2)`, eventError)

// RecordError records an Error event, and marks the execution failed if failed is true.
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

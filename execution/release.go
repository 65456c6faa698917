package execution

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// completeSQL ends the released executions once (a second Complete changes nothing), records
// their End events, and reports for each whether it had been reclaimed.
var completeSQL = fmt.Sprintf(`
WITH r AS (SELECT * FROM unnest($1::bigint[], $2::boolean[]) AS r(id, failed)),
u AS (
    UPDATE taskling.task_execution e
    SET completed_at = clock_timestamp(), failed = e.failed OR r.failed
    FROM r
    WHERE e.id = r.id AND e.completed_at IS NULL
    RETURNING e.id, e.reclaimed_at IS NOT NULL AS reclaimed
), ev AS (
    INSERT INTO taskling.task_execution_event (execution_id, event_type)
    SELECT id, %d FROM u
)
SELECT r.id, coalesce(u.reclaimed, e.reclaimed_at IS NOT NULL, true)
FROM r
LEFT JOIN u ON u.id = r.id
LEFT JOIN taskling.task_execution e ON e.id = r.id`, eventEnd)

// notifyChannel is the LISTEN/NOTIFY channel on which a freed slot is announced; the payload is
// the task id.
const notifyChannel = "taskling_slots"

const notifySQL = `SELECT pg_notify('` + notifyChannel + `', $1::bigint::text)`

// ReleaseRequest returns a slot.
type ReleaseRequest struct {
	TaskID      int64
	TaskName    string
	ExecutionID int64
	TokenID     uuid.UUID
	Failed      bool
}

// ReleaseResult is the outcome of a release.
type ReleaseResult struct {
	// LeaseLost: the slot had been taken from the execution (it was judged dead and reclaimed, or
	// its token was removed); nothing that now belongs to another execution was touched.
	LeaseLost bool
}

// Release runs the release transaction, together with the other token operations this process
// has queued on the task: the token goes back only if this execution is still its grantee
// (identity-checked), the execution is marked completed, and waiters are notified.
func (s *Store) Release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error) {
	o := &op{request: request{release: &req}, ctx: ctx}
	s.submit(req.TaskID, o)
	if err := o.err(); err != nil {
		return ReleaseResult{}, fmt.Errorf("execution: release execution %d of %s: %w", req.ExecutionID, req.TaskName, err)
	}
	return o.outcome.release, nil
}

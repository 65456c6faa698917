package execution

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/tokens"
)

const lockForReleaseSQL = `
UPDATE taskling.task_definition SET hold_lock_execution_id = $2 WHERE id = $1 RETURNING tokens`

const setTokensSQL = `UPDATE taskling.task_definition SET tokens = $2 WHERE id = $1`

// completeSQL ends the execution once (a second Complete changes nothing) and records its End
// event. It reports whether the execution had been reclaimed.
const completeSQL = `
WITH u AS (
    UPDATE taskling.task_execution
    SET completed_at = clock_timestamp(), failed = failed OR $2
    WHERE id = $1 AND completed_at IS NULL
    RETURNING id, reclaimed_at IS NOT NULL AS reclaimed
), e AS (
    INSERT INTO taskling.task_execution_event (execution_id, event_type)
    SELECT id, 4 FROM u
)
SELECT
    coalesce((SELECT reclaimed FROM u), (SELECT reclaimed_at IS NOT NULL FROM taskling.task_execution WHERE id = $1), true),
    EXISTS (SELECT 1 FROM u)`

// NotifyChannel is the LISTEN/NOTIFY channel on which a freed slot is announced; the payload is
// the task id.
const NotifyChannel = "taskling_slots"

const notifySQL = `SELECT pg_notify('` + NotifyChannel + `', $1::bigint::text)`

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
	// AlreadyCompleted: an earlier release had already ended the execution.
	AlreadyCompleted bool
}

// Release runs the release transaction: the token goes back only if this execution is still its
// grantee (identity-checked), the execution is marked completed, and waiters are notified.
func (s *Store) Release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error) {
	var res ReleaseResult
	err := s.inTx(ctx, req.TaskID, func(ctx context.Context, tx *txConn) error {
		res = ReleaseResult{}
		b := &pgx.Batch{}
		b.Queue(lockForReleaseSQL, req.TaskID, req.ExecutionID)
		br := tx.first(ctx, b)
		var text string
		err := br.QueryRow().Scan(&text)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task row %d is gone", req.TaskID)
		}
		if err != nil {
			return err
		}
		list, err := tokens.Parse(text)
		if err != nil {
			return fmt.Errorf("task %s: stored token list: %w", req.TaskName, err)
		}
		next, held := list.Return(req.TokenID, req.ExecutionID)
		b = &pgx.Batch{}
		if held && !list.IsUnlimited() {
			b.Queue(setTokensSQL, req.TaskID, next.String())
			b.Queue(notifySQL, req.TaskID)
		}
		b.Queue(completeSQL, req.ExecutionID, req.Failed)
		br = tx.last(ctx, b)
		defer br.Close()
		if held && !list.IsUnlimited() {
			if _, err := br.Exec(); err != nil {
				return err
			}
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		var reclaimed, updated bool
		if err := br.QueryRow().Scan(&reclaimed, &updated); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil { // COMMIT
			return err
		}
		tx.open = false
		res.LeaseLost = !held || reclaimed
		res.AlreadyCompleted = !updated
		return nil
	})
	if err != nil {
		return ReleaseResult{}, fmt.Errorf("execution: release execution %d of %s: %w", req.ExecutionID, req.TaskName, err)
	}
	return res, nil
}

package execution

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A submission is a durable request to run a task (migration 0007). Workers claim the first
// waiting ones (highest priority, oldest), wait for a slot for each; the grant starts its attempt
// in the same transaction (AcquireRequest.Submission), and the end of that execution settles it
// (the trigger on execution_end).

// Submission statuses, as stored.
const (
	SubmissionWaiting    int16 = 1
	SubmissionInProgress int16 = 2
	SubmissionCompleted  int16 = 3
	SubmissionDead       int16 = 4
	SubmissionCancelled  int16 = 5
)

// Querier runs SQL: a pool, a connection or the caller's transaction (SubmitTx).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewSubmission is what Submit stores.
type NewSubmission struct {
	TaskID         int64
	Priority       int
	ReferenceValue *string
	Header         []byte
	MaxAttempts    int
}

// insertSubmissionSQL adds a waiting submission and wakes the task's idle workers (on commit).
// A duplicate reference inserts nothing.
const insertSubmissionSQL = `
WITH ins AS (
    INSERT INTO taskling.submission (task_id, priority, reference_value, header, max_attempts)
    VALUES ($1, $2, $3, $4::jsonb, $5)
    ON CONFLICT (task_id, reference_value) WHERE reference_value IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id, pg_notify('` + notifyChannel + `', 's' || $1::text) IS NULL FROM ins`

const submissionByReferenceSQL = `SELECT id FROM taskling.submission WHERE task_id = $1 AND reference_value = $2`

// ErrSubmissionRace: a submission with the same reference was inserted by a transaction this
// one's snapshot cannot see (the caller's transaction is REPEATABLE READ or SERIALIZABLE).
var ErrSubmissionRace = errors.New("a concurrent submission with this reference is not visible to this transaction")

// InsertSubmission stores sub through q and returns its id; for a reference value already
// submitted, it returns the existing submission's id and duplicate=true.
func InsertSubmission(ctx context.Context, q Querier, sub NewSubmission) (id int64, duplicate bool, err error) {
	var header any
	if sub.Header != nil {
		header = string(sub.Header)
	}
	var ignored bool
	err = q.QueryRow(ctx, insertSubmissionSQL, sub.TaskID, sub.Priority, sub.ReferenceValue, header, sub.MaxAttempts).Scan(&id, &ignored)
	if err == nil {
		return id, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) || sub.ReferenceValue == nil {
		return 0, false, fmt.Errorf("execution: insert submission: %w", err)
	}
	if err := q.QueryRow(ctx, submissionByReferenceSQL, sub.TaskID, *sub.ReferenceValue).Scan(&id); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false, fmt.Errorf("execution: insert submission: %w", ErrSubmissionRace)
		}
		return 0, false, fmt.Errorf("execution: find submission by reference: %w", err)
	}
	return id, true, nil
}

// ClaimedSubmission is a waiting submission a worker took, to wait for a slot for.
type ClaimedSubmission struct {
	ID          int64   `db:"id"`
	Priority    int     `db:"priority"`
	Reference   *string `db:"reference_value"`
	Header      []byte  `db:"header"`
	Attempts    int     `db:"attempts"`
	MaxAttempts int     `db:"max_attempts"`
}

// claimSubmissionsSQL takes the first $4 waiting submissions of the task that no live worker
// has claimed: a claim lapses once its worker's session is silent for longer than the claim's
// threshold (on the database clock), as a waiter's ticket does.
const claimSubmissionsSQL = `
UPDATE taskling.submission s
SET claimed_by = $2, claim_threshold = $3 * interval '1 microsecond', updated_at = clock_timestamp()
WHERE s.id IN (
    SELECT c.id FROM taskling.submission c
    WHERE c.task_id = $1 AND c.status = 1
      AND (c.claimed_by IS NULL OR NOT EXISTS (
          SELECT 1 FROM taskling.session w
          WHERE w.id = c.claimed_by AND clock_timestamp() - w.last_heartbeat <= c.claim_threshold))
    ORDER BY c.priority DESC, c.id
    LIMIT $4
    FOR UPDATE SKIP LOCKED)
RETURNING s.id, s.priority, s.reference_value, s.header, s.attempts, s.max_attempts`

// ClaimSubmissions claims up to n of the task's first waiting submissions for session, in
// queue order (none when there is none to claim).
func (s *Store) ClaimSubmissions(ctx context.Context, taskID, session int64, threshold time.Duration, n int) ([]ClaimedSubmission, error) {
	var out []ClaimedSubmission
	if err := pgxscan.Select(ctx, s.pool, &out, claimSubmissionsSQL, taskID, session, threshold.Microseconds(), n); err != nil {
		return nil, fmt.Errorf("execution: claim submissions of task %d: %w", taskID, err)
	}
	slices.SortFunc(out, func(a, b ClaimedSubmission) int {
		if a.Priority != b.Priority {
			return cmp.Compare(b.Priority, a.Priority)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// UnclaimSubmission gives a claimed submission back (its worker stopped waiting for a slot).
func (s *Store) UnclaimSubmission(ctx context.Context, id, session int64) error {
	_, err := s.pool.Exec(ctx, `
UPDATE taskling.submission SET claimed_by = NULL, updated_at = clock_timestamp()
WHERE id = $1 AND claimed_by = $2 AND status = 1`, id, session)
	if err != nil {
		return fmt.Errorf("execution: unclaim submission %d: %w", id, err)
	}
	return nil
}

// failStartSQL spends an attempt of a claimed submission whose attempt could not start: back to
// waiting, or dead once its attempts are spent, with the reason.
const failStartSQL = `
UPDATE taskling.submission
SET attempts = attempts + 1,
    status = CASE WHEN attempts + 1 >= max_attempts THEN 4 ELSE 1 END,
    finished_at = CASE WHEN attempts + 1 >= max_attempts THEN clock_timestamp() END,
    last_error = 'attempt ' || (attempts + 1) || ' could not start: ' || $3,
    claimed_by = NULL, updated_at = clock_timestamp()
WHERE id = $1 AND claimed_by = $2 AND status = 1`

// FailSubmissionStart spends an attempt of submission id, claimed by session, whose attempt could
// not start for a reason its own row gives (message): trying again would fail the same way.
func (s *Store) FailSubmissionStart(ctx context.Context, id, session int64, message string) error {
	if _, err := s.pool.Exec(ctx, failStartSQL, id, session, message); err != nil {
		return fmt.Errorf("execution: record that submission %d could not start: %w", id, err)
	}
	return nil
}

// stuckSubmissionsSQL finds the task's in-progress submissions whose execution ended without
// settling them (a reclaim that committed alongside their start) — ended — or whose holder is
// judged dead on the database clock but not reclaimed yet — dead.
var stuckSubmissionsSQL = `
SELECT count(*) FILTER (WHERE x.execution_id IS NOT NULL), count(*) FILTER (WHERE x.execution_id IS NULL AND NOT ` + aliveSQL + `)
FROM taskling.submission sub
JOIN taskling.task_execution e ON e.id = sub.execution_id
LEFT JOIN taskling.session s ON s.id = e.session_id
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
WHERE sub.status = 2 AND sub.task_id = $1`

// requeueEndedSQL settles in-progress submissions whose execution has ended, as the trigger
// would have.
const requeueEndedSQL = `
UPDATE taskling.submission sub
SET status = CASE WHEN x.outcome = 1 THEN 3 WHEN sub.cancel_requested_at IS NOT NULL THEN 5
                  WHEN sub.attempts >= sub.max_attempts THEN 4 ELSE 1 END,
    last_error = CASE WHEN x.outcome = 1 THEN sub.last_error
                      ELSE coalesce(sub.last_error, 'attempt ' || sub.attempts || ' (execution ' || x.execution_id || ') ended without a result') END,
    finished_at = CASE WHEN x.outcome = 1 OR sub.cancel_requested_at IS NOT NULL OR sub.attempts >= sub.max_attempts THEN clock_timestamp() END,
    updated_at = clock_timestamp()
FROM taskling.execution_end x
WHERE x.execution_id = sub.execution_id AND sub.status = 2 AND sub.task_id = $1`

// RecoverSubmissions settles the task's in-progress submissions that no live execution runs any
// more: those whose execution ended are settled at once; those whose holder is dead are reaped
// (Reap), and their end settles them. It returns how many it found.
func (s *Store) RecoverSubmissions(ctx context.Context, taskID int64, req AcquireRequest) (int, error) {
	var ended, dead int
	if err := s.pool.QueryRow(ctx, stuckSubmissionsSQL, taskID).Scan(&ended, &dead); err != nil {
		return 0, fmt.Errorf("execution: find stuck submissions of task %d: %w", taskID, err)
	}
	if ended > 0 {
		if _, err := s.pool.Exec(ctx, requeueEndedSQL, taskID); err != nil {
			return 0, fmt.Errorf("execution: settle submissions of task %d: %w", taskID, err)
		}
	}
	if dead > 0 {
		req.Reap, req.Wait, req.RecordDenial, req.Ticket = true, false, false, 0
		if _, err := s.Acquire(ctx, req); err != nil {
			return ended, err
		}
	}
	return ended + dead, nil
}

// SubmissionRow is a submission as the API shows it.
type SubmissionRow struct {
	ID                int64      `db:"id"`
	TaskID            int64      `db:"task_id"`
	Application       string     `db:"application_name"`
	Task              string     `db:"task_name"`
	Status            int16      `db:"status"`
	Position          int        `db:"position"` // 1 = next; 0 unless waiting
	Priority          int        `db:"priority"`
	ReferenceValue    *string    `db:"reference_value"`
	Header            []byte     `db:"header"`
	Attempts          int        `db:"attempts"`
	MaxAttempts       int        `db:"max_attempts"`
	ExecutionID       *int64     `db:"execution_id"`
	ItemsDone         *int64     `db:"items_done"`
	ItemsTotal        *int64     `db:"items_total"`
	LastError         *string    `db:"last_error"`
	CancelRequestedAt *time.Time `db:"cancel_requested_at"`
	CancelReason      *string    `db:"cancel_reason"`
	SubmittedAt       time.Time  `db:"submitted_at"`
	UpdatedAt         time.Time  `db:"updated_at"`
	FinishedAt        *time.Time `db:"finished_at"`
}

// submissionColumns reads submission sub with its task d and the progress of its current or
// last execution e. The position counts the waiting submissions ahead (priority, then age).
const submissionColumns = `sub.id, sub.task_id, d.application_name, d.task_name, sub.status,
    CASE WHEN sub.status = 1 THEN 1 + (SELECT count(*) FROM taskling.submission a
        WHERE a.task_id = sub.task_id AND a.status = 1
          AND (a.priority > sub.priority OR (a.priority = sub.priority AND a.id < sub.id))) ELSE 0 END AS position,
    sub.priority, sub.reference_value, sub.header, sub.attempts, sub.max_attempts,
    sub.execution_id, e.items_done, e.items_total, sub.last_error, sub.cancel_requested_at, sub.cancel_reason,
    sub.submitted_at, sub.updated_at, sub.finished_at`

const submissionFrom = `taskling.submission sub
JOIN taskling.task_definition d ON d.id = sub.task_id
LEFT JOIN taskling.task_execution e ON e.id = sub.execution_id`

// Submission returns one submission; ok is false when there is none with that id.
func (s *Store) Submission(ctx context.Context, id int64) (row SubmissionRow, ok bool, err error) {
	var out []SubmissionRow
	if err := pgxscan.Select(ctx, s.pool, &out, `SELECT `+submissionColumns+` FROM `+submissionFrom+` WHERE sub.id = $1`, id); err != nil {
		return row, false, fmt.Errorf("execution: submission %d: %w", id, err)
	}
	if len(out) == 0 {
		return row, false, nil
	}
	return out[0], true, nil
}

// SubmissionFilter selects a task's submissions.
type SubmissionFilter struct {
	Status int16 // 0: any
	Before int64 // ids below this (paging); 0: from the newest
	Limit  int
}

// Submissions returns the task's submissions, newest first; waiting ones are in queue order
// when Status is SubmissionWaiting.
func (s *Store) Submissions(ctx context.Context, taskID int64, f SubmissionFilter) ([]SubmissionRow, error) {
	order := `sub.id DESC`
	if f.Status == SubmissionWaiting {
		order = `sub.priority DESC, sub.id`
	}
	q := `SELECT ` + submissionColumns + ` FROM ` + submissionFrom + `
WHERE sub.task_id = $1 AND ($2 = 0 OR sub.status = $2) AND ($3 = 0 OR sub.id < $3)
ORDER BY ` + order + ` LIMIT $4`
	var out []SubmissionRow
	if err := pgxscan.Select(ctx, s.pool, &out, q, taskID, f.Status, f.Before, f.Limit); err != nil {
		return nil, fmt.Errorf("execution: submissions of task %d: %w", taskID, err)
	}
	return out, nil
}

// SubmissionAttempt is one attempt of a submission.
type SubmissionAttempt struct {
	Attempt     int   `db:"attempt"`
	ExecutionID int64 `db:"execution_id"`
}

// SubmissionAttempts lists a submission's attempts, first first.
func (s *Store) SubmissionAttempts(ctx context.Context, id int64) ([]SubmissionAttempt, error) {
	var out []SubmissionAttempt
	if err := pgxscan.Select(ctx, s.pool, &out, `SELECT attempt, execution_id FROM taskling.submission_attempt WHERE submission_id = $1 ORDER BY attempt`, id); err != nil {
		return nil, fmt.Errorf("execution: attempts of submission %d: %w", id, err)
	}
	return out, nil
}

// cancelSubmissionSQL cancels a waiting submission at once; a running one is marked, its
// worker told (NOTIFY 'c<id>', and the next heartbeat), and its end settles it as cancelled.
const cancelSubmissionSQL = `
WITH c AS (
    UPDATE taskling.submission
    SET status = CASE WHEN status = 1 THEN 5 ELSE status END,
        finished_at = CASE WHEN status = 1 THEN clock_timestamp() ELSE finished_at END,
        cancel_requested_at = clock_timestamp(), cancel_reason = $2, claimed_by = NULL, updated_at = clock_timestamp()
    WHERE id = $1 AND status IN (1, 2)
    RETURNING id, task_id, status
), ch AS (
    INSERT INTO taskling.operator_change (task_id, changed_by, principal, field, old_value, new_value)
    SELECT c.task_id, $3, $4, 'submission #' || c.id, CASE WHEN c.status = 5 THEN 'waiting' ELSE 'in_progress' END,
        CASE WHEN c.status = 5 THEN 'cancelled' ELSE 'cancel requested' END || CASE WHEN $2 = '' THEN '' ELSE ': ' || $2 END
    FROM c
)
SELECT c.status, pg_notify('` + notifyChannel + `', 'c' || c.id) IS NULL FROM c`

// CancelSubmission cancels submission id, recording the operator change ("submission #ID") by
// op: found is false when it does not exist or has already finished (completed, dead or
// cancelled).
func (s *Store) CancelSubmission(ctx context.Context, id int64, reason string, op Operator) (status int16, found bool, err error) {
	var ignored bool
	err = s.pool.QueryRow(ctx, cancelSubmissionSQL, id, reason, op.By, op.Principal).Scan(&status, &ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("execution: cancel submission %d: %w", id, err)
	}
	return status, true, nil
}

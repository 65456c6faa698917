package adminstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/tasklingtype"
)

// KeepForever as a keep setting means "never delete" (it is about 292 years).
const KeepForever = time.Duration(math.MaxInt64)

// MaxCleanupBatch is the most executions one cleanup transaction deletes.
const MaxCleanupBatch = 1000

// RetentionState is a task's row of taskling.retention: what its hosts declared, the operator's
// overrides and its last cleaning.
type RetentionState struct {
	Declared    *execution.Retention // nil: no host declared one yet
	DeclaredBy  string
	Overrides   execution.RetentionOverrides
	LastCleaned *time.Time
	CleaningBy  string // the host cleaning it now, if any
	RowsDeleted int64
	DeclaredAt  *time.Time
}

// Effective is the retention in force: the operator's overrides over what hosts declared, over
// fallback when no host declared any.
func (r RetentionState) Effective(fallback execution.Retention) execution.Retention {
	if r.Declared != nil {
		fallback = *r.Declared
	}
	return r.Overrides.Apply(fallback)
}

// The retention reads: a task's row of taskling.retention as scanRetention scans it — what its
// hosts declared, who last, the overrides, the last cleaning, who cleans it now (a live claim),
// the rows deleted in all.

// retentionSQL reads task $1's retention row.
const retentionSQL = `
SELECT r.declared_completed, r.declared_failed, r.declared_blocked, coalesce(r.declared_by, ''),
    r.declared_at, r.override_completed, r.override_failed, r.override_blocked, r.last_cleaned_at,
    CASE WHEN r.claimed_until > clock_timestamp() THEN coalesce(r.claimed_by, '') ELSE '' END, coalesce(r.rows_deleted, 0)
FROM taskling.retention r WHERE r.task_id = $1`

// dueForCleanupSQL reads up to $2 tasks not cleaned for at least $1 and not being cleaned now,
// those cleaned longest ago first.
const dueForCleanupSQL = `
SELECT d.id, d.application_name, d.task_name, r.declared_completed, r.declared_failed, r.declared_blocked, coalesce(r.declared_by, ''),
    r.declared_at, r.override_completed, r.override_failed, r.override_blocked, r.last_cleaned_at,
    CASE WHEN r.claimed_until > clock_timestamp() THEN coalesce(r.claimed_by, '') ELSE '' END, coalesce(r.rows_deleted, 0)
FROM taskling.task_definition d LEFT JOIN taskling.retention r ON r.task_id = d.id
WHERE (r.last_cleaned_at IS NULL OR r.last_cleaned_at < clock_timestamp() - $1::interval)
  AND (r.claimed_until IS NULL OR r.claimed_until < clock_timestamp())
ORDER BY r.last_cleaned_at NULLS FIRST, d.id
LIMIT $2`

// allTasksForCleanupSQL reads every task with its retention row.
const allTasksForCleanupSQL = `
SELECT d.id, d.application_name, d.task_name, r.declared_completed, r.declared_failed, r.declared_blocked, coalesce(r.declared_by, ''),
    r.declared_at, r.override_completed, r.override_failed, r.override_blocked, r.last_cleaned_at,
    CASE WHEN r.claimed_until > clock_timestamp() THEN coalesce(r.claimed_by, '') ELSE '' END, coalesce(r.rows_deleted, 0)
FROM taskling.task_definition d LEFT JOIN taskling.retention r ON r.task_id = d.id
ORDER BY d.application_name, d.task_name`

// scanRetention scans a retention row, after the row's leading columns into lead.
func scanRetention(row pgx.Row, lead ...any) (RetentionState, error) {
	var st RetentionState
	var c, f, b *time.Duration
	err := row.Scan(append(lead, &c, &f, &b, &st.DeclaredBy, &st.DeclaredAt, &st.Overrides.Completed, &st.Overrides.Failed,
		&st.Overrides.Blocked, &st.LastCleaned, &st.CleaningBy, &st.RowsDeleted)...)
	if c != nil && f != nil && b != nil {
		st.Declared = &execution.Retention{Completed: *c, Failed: *f, Blocked: *b}
	}
	return st, err
}

// RetentionOf returns a task's retention row (zero when it has none).
func (s *Store) RetentionOf(ctx context.Context, taskID int64) (RetentionState, error) {
	st, err := scanRetention(s.db.QueryRow(ctx, retentionSQL, taskID))
	if errors.Is(err, pgx.ErrNoRows) {
		return RetentionState{}, nil
	}
	if err != nil {
		return st, fmt.Errorf("retention of task %d: %w", taskID, err)
	}
	return st, nil
}

// CleanupTask is a task due for cleaning, with its retention row.
type CleanupTask struct {
	TaskID      int64
	Application string
	Task        string
	Retention   RetentionState
}

// DueForCleanup returns up to n tasks not cleaned for at least every and not being cleaned now,
// those cleaned longest ago first.
func (s *Store) DueForCleanup(ctx context.Context, every time.Duration, n int) ([]CleanupTask, error) {
	return s.cleanupTasks(ctx, dueForCleanupSQL, every, n)
}

func (s *Store) cleanupTasks(ctx context.Context, sql string, args ...any) ([]CleanupTask, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("tasks due for cleanup: %w", err)
	}
	defer rows.Close()
	var out []CleanupTask
	for rows.Next() {
		var t CleanupTask
		var err error
		if t.Retention, err = scanRetention(rows, &t.TaskID, &t.Application, &t.Task); err != nil {
			return nil, fmt.Errorf("tasks due for cleanup: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tasks due for cleanup: %w", err)
	}
	return out, nil
}

// AllTasksForCleanup returns every task with its retention row (an operator's cleanup).
func (s *Store) AllTasksForCleanup(ctx context.Context) ([]CleanupTask, error) {
	return s.cleanupTasks(ctx, allTasksForCleanupSQL)
}

// ClaimCleanup claims the cleaning of a task for claimant until hold from now, by a
// compare-and-set: it fails (false) while another claim holds, or when the task was cleaned less
// than every ago (every = 0: whenever no claim holds, as an operator's cleanup does).
func (s *Store) ClaimCleanup(ctx context.Context, taskID int64, claimant string, every, hold time.Duration) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `
INSERT INTO taskling.retention AS r (task_id, last_cleaned_at, claimed_by, claimed_until)
VALUES ($1, clock_timestamp(), $2, clock_timestamp() + $4::interval)
ON CONFLICT (task_id) DO UPDATE SET last_cleaned_at = clock_timestamp(), claimed_by = $2,
    claimed_until = clock_timestamp() + $4::interval
WHERE (r.claimed_until IS NULL OR r.claimed_until < clock_timestamp())
  AND (r.last_cleaned_at IS NULL OR r.last_cleaned_at <= clock_timestamp() - $3::interval)
RETURNING true`, taskID, claimant, every, hold).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim the cleanup of task %d: %w", taskID, err)
	}
	return ok, nil
}

// ErrCleanupClaimLost: another host took the cleanup claim (this one's hold expired).
var ErrCleanupClaimLost = errors.New("the cleanup claim was lost")

// ReleaseCleanup ends claimant's claim, adding the rows it deleted to the task's count.
func (s *Store) ReleaseCleanup(ctx context.Context, taskID int64, claimant string, deleted int64) error {
	_, err := s.db.Exec(ctx, `UPDATE taskling.retention SET claimed_until = NULL, rows_deleted = rows_deleted + $3
WHERE task_id = $1 AND claimed_by = $2`, taskID, claimant, deleted)
	if err != nil {
		return fmt.Errorf("release the cleanup claim of task %d: %w", taskID, err)
	}
	return nil
}

// cleanupBatchSQL deletes the candidates with everything that hangs off them: events (by cascade),
// ends, block attempts, completed blocks whose latest attempt they ran (except the protected
// ones, $8: the latest of each kind, which continuing ranges and LastBlock read), unsucceeded
// claims of their references (a succeeded claim stays: its promise outlives the row), and
// attempts of finished submissions. Their cron instants are recorded, sorted, in one row.
const cleanupBatchSQL = `
WITH cand AS (SELECT * FROM taskling.cleanup_candidates($1, $2, $3, $4, $5, $6, $7)),
del AS (
    DELETE FROM taskling.task_execution e USING cand WHERE e.id = cand.id
    RETURNING e.id, e.scheduled_for, e.reference_value, cand.class
),
ends AS (DELETE FROM taskling.execution_end x USING del WHERE x.execution_id = del.id),
attempts AS (DELETE FROM taskling.block_attempt a USING del WHERE a.execution_id = del.id),
blocks AS (
    DELETE FROM taskling.block b USING del
    WHERE b.execution_id = del.id AND b.status = taskling.block_status('completed') AND b.id <> ALL ($8::bigint[])
    RETURNING b.id
),
claims AS (
    DELETE FROM taskling.reference_claim c USING del
    WHERE c.task_id = $1 AND c.reference_value = del.reference_value AND c.execution_id = del.id AND NOT c.succeeded
),
subs AS (DELETE FROM taskling.submission_attempt a USING del WHERE a.execution_id = del.id),
instants AS (
    INSERT INTO taskling.forgotten_instants (task_id, first_instant, last_instant, instants)
    SELECT $1, min(scheduled_for), max(scheduled_for), array_agg(scheduled_for ORDER BY scheduled_for)
    FROM del WHERE scheduled_for IS NOT NULL HAVING count(*) > 0
    RETURNING cardinality(instants) AS n
)
SELECT (SELECT count(*) FROM del WHERE class = 1), (SELECT count(*) FROM del WHERE class = 2),
       (SELECT count(*) FROM del WHERE class = 3), (SELECT count(*) FROM blocks),
       coalesce((SELECT sum(n) FROM instants), 0),
       (SELECT max(started_at) FROM cand), (SELECT max(id) FROM cand c WHERE c.started_at = (SELECT max(started_at) FROM cand))`

// protectedBlocksSQL lists the blocks a cleanup keeps whatever their age: for each kind the
// newest and those with the greatest start and end (what LastBlock and continuing ranges read).
const protectedBlocksSQL = `
SELECT coalesce(array_agg(DISTINCT id), '{}') FROM (
    (SELECT DISTINCT ON (kind) id FROM taskling.block WHERE task_id = $1 ORDER BY kind, id DESC)
    UNION ALL
    (SELECT DISTINCT ON (kind) id FROM taskling.block WHERE task_id = $1
        ORDER BY kind, from_number DESC NULLS LAST, from_date DESC NULLS LAST, id DESC)
    UNION ALL
    (SELECT DISTINCT ON (kind) id FROM taskling.block WHERE task_id = $1
        ORDER BY kind, to_number DESC NULLS LAST, to_date DESC NULLS LAST, id DESC)
) p`

// finishedSubmissionsSQL deletes finished submissions past retention that have no reference
// value, and drops the header of those that have one (they stay, so that a duplicate reference
// still returns them), at most $4 of each.
const finishedSubmissionsSQL = `
WITH old AS (
    SELECT id, reference_value FROM taskling.submission
    WHERE task_id = $1
      AND status IN (taskling.submission_status('completed'), taskling.submission_status('dead'), taskling.submission_status('cancelled'))
      AND (reference_value IS NULL OR header IS NOT NULL)
      AND finished_at < clock_timestamp()
          - CASE WHEN status = taskling.submission_status('completed') THEN $2::interval ELSE $3::interval END
    ORDER BY finished_at LIMIT $4
),
gone AS (DELETE FROM taskling.submission s USING old WHERE s.id = old.id AND old.reference_value IS NULL RETURNING s.id),
kept AS (UPDATE taskling.submission s SET header = NULL FROM old WHERE s.id = old.id AND old.reference_value IS NOT NULL RETURNING s.id)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM kept)`

// Cleaner deletes one task's history in batches, each its own transaction, renewing its claim
// in each (so that a cleaner that lost its claim stops).
type Cleaner struct {
	Store     *Store
	TaskID    int64
	Keep      execution.Retention
	Claimant  string        // "" for none (an operator's dry run)
	Hold      time.Duration // how long each renewal holds the claim
	BatchSize int           // at most MaxCleanupBatch; 0 means MaxCleanupBatch

	protected []int64
	afterAt   time.Time
	afterID   int64
	subsDone  bool
}

// Batch deletes the next batch; done is true when nothing is left to delete.
func (c *Cleaner) Batch(ctx context.Context) (counts tasklingtype.CleanupCounts, done bool, err error) {
	size := c.BatchSize
	if size <= 0 || size > MaxCleanupBatch {
		size = MaxCleanupBatch
	}
	if c.protected == nil {
		if err := c.Store.db.QueryRow(ctx, protectedBlocksSQL, c.TaskID).Scan(&c.protected); err != nil {
			return counts, false, fmt.Errorf("protected blocks of task %d: %w", c.TaskID, err)
		}
		c.afterAt = time.Unix(0, 0).UTC()
	}
	err = pgx.BeginFunc(ctx, c.Store.db, func(tx pgx.Tx) error {
		if c.Claimant != "" {
			tag, err := tx.Exec(ctx, `UPDATE taskling.retention SET claimed_until = clock_timestamp() + $3::interval
WHERE task_id = $1 AND claimed_by = $2 AND claimed_until > clock_timestamp()`, c.TaskID, c.Claimant, c.Hold)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return ErrCleanupClaimLost
			}
		}
		// Ordered with ForceBlock: this batch sees every force committed before it took the lock.
		if _, err := tx.Exec(ctx, `SELECT taskling.lock_task_forces($1)`, c.TaskID); err != nil {
			return err
		}
		if !c.subsDone {
			// Grants to direct tickets that lapsed are kept like failed starts.
			if _, err := tx.Exec(ctx, `DELETE FROM taskling.handoff WHERE task_id = $1 AND lapsed_at < clock_timestamp() - $2::interval`,
				c.TaskID, c.Keep.Failed); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, finishedSubmissionsSQL, c.TaskID, c.Keep.Completed, c.Keep.Failed, size).
				Scan(&counts.Submissions, &counts.Compacted); err != nil {
				return err
			}
		}
		var lastAt *time.Time
		var lastID *int64
		if err := tx.QueryRow(ctx, cleanupBatchSQL, c.TaskID, c.Keep.Completed, c.Keep.Failed, c.Keep.Blocked,
			c.afterAt, c.afterID, size, c.protected).Scan(&counts.Completed, &counts.Failed, &counts.Blocked,
			&counts.Blocks, &counts.Instants, &lastAt, &lastID); err != nil {
			return err
		}
		if lastAt != nil && lastID != nil {
			c.afterAt, c.afterID = *lastAt, *lastID
		}
		return nil
	})
	if err != nil {
		return tasklingtype.CleanupCounts{}, false, fmt.Errorf("clean task %d: %w", c.TaskID, err)
	}
	c.subsDone = counts.Submissions+counts.Compacted < int64(size)
	return counts, c.subsDone && counts.Completed+counts.Failed+counts.Blocked < int64(size), nil
}

// planCleanupSQL counts what a cleanup of task $1 would delete now: the candidates by class, and
// their cron instants.
const planCleanupSQL = `
SELECT count(*) FILTER (WHERE class = 1), count(*) FILTER (WHERE class = 2), count(*) FILTER (WHERE class = 3),
       count(*) FILTER (WHERE scheduled_for IS NOT NULL)
FROM taskling.cleanup_candidates($1, $2, $3, $4, $5, $6, $7)`

// PlanCleanup counts what a cleanup of the task with keep would delete now, deleting nothing.
func (s *Store) PlanCleanup(ctx context.Context, taskID int64, keep execution.Retention) (tasklingtype.CleanupCounts, error) {
	var c tasklingtype.CleanupCounts
	err := s.db.QueryRow(ctx, planCleanupSQL,
		taskID, keep.Completed, keep.Failed, keep.Blocked, time.Unix(0, 0).UTC(), 0, math.MaxInt32).
		Scan(&c.Completed, &c.Failed, &c.Blocked, &c.Instants)
	if err != nil {
		return c, fmt.Errorf("plan the cleanup of task %d: %w", taskID, err)
	}
	err = s.db.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE reference_value IS NULL), count(*) FILTER (WHERE reference_value IS NOT NULL)
FROM taskling.submission
WHERE task_id = $1
  AND status IN (taskling.submission_status('completed'), taskling.submission_status('dead'), taskling.submission_status('cancelled'))
  AND (reference_value IS NULL OR header IS NOT NULL)
  AND finished_at < clock_timestamp()
      - CASE WHEN status = taskling.submission_status('completed') THEN $2::interval ELSE $3::interval END`,
		taskID, keep.Completed, keep.Failed).Scan(&c.Submissions, &c.Compacted)
	if err != nil {
		return c, fmt.Errorf("plan the cleanup of task %d: %w", taskID, err)
	}
	return c, nil
}

// ForgottenInstants returns the cron instants in [from, to] of the task's deleted executions.
func (s *Store) ForgottenInstants(ctx context.Context, taskID int64, from, to time.Time) ([]time.Time, error) {
	rows, err := s.db.Query(ctx, `
SELECT i FROM taskling.forgotten_instants f, unnest(f.instants) AS i
WHERE f.task_id = $1 AND f.last_instant >= $2 AND f.first_instant <= $3 AND i BETWEEN $2 AND $3`, taskID, from, to)
	if err != nil {
		return nil, fmt.Errorf("forgotten instants of task %d: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("forgotten instants of task %d: %w", taskID, err)
	}
	return out, nil
}

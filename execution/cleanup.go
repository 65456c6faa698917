package execution

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// KeepForever as a keep setting means "never delete" (it is about 292 years).
const KeepForever = time.Duration(math.MaxInt64)

// MinKeep is the shortest keep setting: history younger than a minute is never deleted.
const MinKeep = time.Minute

// MaxCleanupBatch is the most executions one cleanup transaction deletes.
const MaxCleanupBatch = 1000

// Retention is how long a task's history is kept, by outcome.
type Retention struct {
	// Completed executions (and completed submissions).
	Completed time.Duration
	// Failed and dead executions (and dead or cancelled submissions).
	Failed time.Duration
	// Blocked (denied) starts.
	Blocked time.Duration
}

// Validate reports the first keep setting below MinKeep, naming it; in says where it came from.
func (r Retention) Validate(in string) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"KeepCompleted", r.Completed}, {"KeepFailed", r.Failed}, {"KeepBlocked", r.Blocked}} {
		if err := checkMin(f.name, in, f.d, MinKeep); err != nil {
			return err
		}
	}
	return nil
}

// RetentionOverrides are an operator's keep settings; nil fields are not overridden.
type RetentionOverrides struct {
	Completed, Failed, Blocked *time.Duration
}

// IsZero reports whether nothing is overridden.
func (o RetentionOverrides) IsZero() bool {
	return o.Completed == nil && o.Failed == nil && o.Blocked == nil
}

// Apply returns r with every overridden field replaced.
func (o RetentionOverrides) Apply(r Retention) Retention {
	if o.Completed != nil {
		r.Completed = *o.Completed
	}
	if o.Failed != nil {
		r.Failed = *o.Failed
	}
	if o.Blocked != nil {
		r.Blocked = *o.Blocked
	}
	return r
}

// ValidateFields checks each overridden value.
func (o RetentionOverrides) ValidateFields() error {
	const in = " (operator override)"
	for _, f := range []struct {
		name string
		d    *time.Duration
	}{{"KeepCompleted", o.Completed}, {"KeepFailed", o.Failed}, {"KeepBlocked", o.Blocked}} {
		if f.d != nil {
			if err := checkMin(f.name, in, *f.d, MinKeep); err != nil {
				return err
			}
		}
	}
	return nil
}

// RetentionState is a task's row of taskling.retention: what its hosts declared, the operator's
// overrides and its last cleaning.
type RetentionState struct {
	Declared    *Retention // nil: no host declared one yet
	DeclaredBy  string
	Overrides   RetentionOverrides
	LastCleaned *time.Time
	CleaningBy  string // the host cleaning it now, if any
	RowsDeleted int64
	DeclaredAt  *time.Time
}

// Effective is the retention in force: the operator's overrides over what hosts declared, over
// fallback when no host declared any.
func (r RetentionState) Effective(fallback Retention) Retention {
	if r.Declared != nil {
		fallback = *r.Declared
	}
	return r.Overrides.Apply(fallback)
}

const retentionColumns = `r.declared_completed, r.declared_failed, r.declared_blocked, coalesce(r.declared_by, ''),
    r.declared_at, r.override_completed, r.override_failed, r.override_blocked, r.last_cleaned_at,
    CASE WHEN r.claimed_until > clock_timestamp() THEN coalesce(r.claimed_by, '') ELSE '' END, coalesce(r.rows_deleted, 0)`

// scanRetention scans retentionColumns, after the row's leading columns into lead.
func scanRetention(row pgx.Row, lead ...any) (RetentionState, error) {
	var st RetentionState
	var c, f, b *time.Duration
	err := row.Scan(append(lead, &c, &f, &b, &st.DeclaredBy, &st.DeclaredAt, &st.Overrides.Completed, &st.Overrides.Failed,
		&st.Overrides.Blocked, &st.LastCleaned, &st.CleaningBy, &st.RowsDeleted)...)
	if c != nil && f != nil && b != nil {
		st.Declared = &Retention{Completed: *c, Failed: *f, Blocked: *b}
	}
	return st, err
}

// RetentionOf returns a task's retention row (zero when it has none).
func (s *Store) RetentionOf(ctx context.Context, taskID int64) (RetentionState, error) {
	st, err := scanRetention(s.pool.QueryRow(ctx, `SELECT `+retentionColumns+` FROM taskling.retention r WHERE r.task_id = $1`, taskID))
	if errors.Is(err, pgx.ErrNoRows) {
		return RetentionState{}, nil
	}
	if err != nil {
		return st, fmt.Errorf("execution: retention of task %d: %w", taskID, err)
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
	return s.cleanupTasks(ctx, `
SELECT d.id, d.application_name, d.task_name, `+retentionColumns+`
FROM taskling.task_definition d LEFT JOIN taskling.retention r ON r.task_id = d.id
WHERE (r.last_cleaned_at IS NULL OR r.last_cleaned_at < clock_timestamp() - $1::interval)
  AND (r.claimed_until IS NULL OR r.claimed_until < clock_timestamp())
ORDER BY r.last_cleaned_at NULLS FIRST, d.id
LIMIT $2`, every, n)
}

func (s *Store) cleanupTasks(ctx context.Context, sql string, args ...any) ([]CleanupTask, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("execution: tasks due for cleanup: %w", err)
	}
	defer rows.Close()
	var out []CleanupTask
	for rows.Next() {
		var t CleanupTask
		var err error
		if t.Retention, err = scanRetention(rows, &t.TaskID, &t.Application, &t.Task); err != nil {
			return nil, fmt.Errorf("execution: tasks due for cleanup: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("execution: tasks due for cleanup: %w", err)
	}
	return out, nil
}

// AllTasksForCleanup returns every task with its retention row (an operator's cleanup).
func (s *Store) AllTasksForCleanup(ctx context.Context) ([]CleanupTask, error) {
	return s.cleanupTasks(ctx, `
SELECT d.id, d.application_name, d.task_name, `+retentionColumns+`
FROM taskling.task_definition d LEFT JOIN taskling.retention r ON r.task_id = d.id
ORDER BY d.application_name, d.task_name`)
}

// ClaimCleanup claims the cleaning of a task for claimant until hold from now, by a
// compare-and-set: it fails (false) while another claim holds, or when the task was cleaned less
// than every ago (every = 0: whenever no claim holds, as an operator's cleanup does).
func (s *Store) ClaimCleanup(ctx context.Context, taskID int64, claimant string, every, hold time.Duration) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `
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
		return false, fmt.Errorf("execution: claim the cleanup of task %d: %w", taskID, err)
	}
	return ok, nil
}

// ErrCleanupClaimLost: another host took the cleanup claim (this one's hold expired).
var ErrCleanupClaimLost = errors.New("the cleanup claim was lost")

// ReleaseCleanup ends claimant's claim, adding the rows it deleted to the task's count.
func (s *Store) ReleaseCleanup(ctx context.Context, taskID int64, claimant string, deleted int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE taskling.retention SET claimed_until = NULL, rows_deleted = rows_deleted + $3
WHERE task_id = $1 AND claimed_by = $2`, taskID, claimant, deleted)
	if err != nil {
		return fmt.Errorf("execution: release the cleanup claim of task %d: %w", taskID, err)
	}
	return nil
}

// CleanupCounts are the rows one cleanup deleted (or, in a dry run, would delete).
type CleanupCounts struct {
	Completed   int64 // completed executions
	Failed      int64 // failed and dead executions
	Blocked     int64 // blocked (denied) starts
	Blocks      int64 // completed blocks (with their items and attempts)
	Submissions int64 // finished submissions deleted
	Compacted   int64 // finished submissions with a reference value whose header was dropped
	Instants    int64 // cron instants of deleted executions, kept in forgotten_instants
}

// Executions is the number of executions deleted.
func (c CleanupCounts) Executions() int64 { return c.Completed + c.Failed + c.Blocked }

// Rows is every row counted.
func (c CleanupCounts) Rows() int64 { return c.Executions() + c.Blocks + c.Submissions }

// Add adds o to c.
func (c *CleanupCounts) Add(o CleanupCounts) {
	c.Completed += o.Completed
	c.Failed += o.Failed
	c.Blocked += o.Blocked
	c.Blocks += o.Blocks
	c.Submissions += o.Submissions
	c.Compacted += o.Compacted
	c.Instants += o.Instants
}

// cleanupCandidatesSQL selects the executions of task $1 that retention ($2 completed, $3 failed,
// $4 blocked) lets go, oldest first, after the keyset position ($5, $6), at most $7. Protected:
// an execution that has not ended (a live holder, or one not yet judged dead), the task's latest
// execution and its latest scheduled one (the schedule's last run) unless the task is retired
// (its history then goes entirely, by age), the execution of a block not completed (it may be
// retaken, and is shown with its attempt) or of a completed block with a pending force (it will
// be taken again: the force, its block and the attempt stay until then), and attempts of
// submissions still waiting or running.
const cleanupCandidatesSQL = `
SELECT e.id, e.started_at, e.scheduled_for, e.reference_value,
       CASE WHEN e.blocked THEN 3 WHEN x.outcome = 1 AND NOT e.failed THEN 1 ELSE 2 END AS class
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
WHERE e.task_id = $1
  AND e.started_at < clock_timestamp() - least($2::interval, $3::interval, $4::interval)
  AND (e.started_at, e.id) > ($5::timestamptz, $6::bigint)
  AND CASE WHEN e.blocked THEN e.started_at < clock_timestamp() - $4::interval
           WHEN x.execution_id IS NULL THEN false
           WHEN x.outcome = 1 AND NOT e.failed THEN x.ended_at < clock_timestamp() - $2::interval
           ELSE x.ended_at < clock_timestamp() - $3::interval END
  AND (EXISTS (SELECT 1 FROM taskling.task_definition r WHERE r.id = $1 AND r.retired_at IS NOT NULL)
       OR e.id <> ALL (ARRAY(
        (SELECT l.id FROM taskling.task_execution l WHERE l.task_id = $1 ORDER BY l.started_at DESC, l.id DESC LIMIT 1)
        UNION ALL
        (SELECT l.id FROM taskling.task_execution l WHERE l.task_id = $1 AND l.scheduled_for IS NOT NULL
         ORDER BY l.scheduled_for DESC LIMIT 1))))
  AND NOT EXISTS (SELECT 1 FROM taskling.block b WHERE b.execution_id = e.id
                  AND (b.status <> 3 OR EXISTS (SELECT 1 FROM taskling.forced_block f WHERE f.block_id = b.id AND f.taken_at IS NULL)))
  AND NOT EXISTS (SELECT 1 FROM taskling.submission_attempt a JOIN taskling.submission s ON s.id = a.submission_id
                  WHERE a.execution_id = e.id AND s.status IN (1, 2))
ORDER BY e.started_at, e.id
LIMIT $7`

// cleanupBatchSQL deletes the candidates with everything that hangs off them: events (by cascade),
// ends, block attempts, completed blocks whose latest attempt they ran (except the protected
// ones, $8: the latest of each kind, which continuing ranges and LastBlock read), unsucceeded
// claims of their references (a succeeded claim stays: its promise outlives the row), and
// attempts of finished submissions. Their cron instants are recorded, sorted, in one row.
var cleanupBatchSQL = `
WITH cand AS (` + cleanupCandidatesSQL + `),
del AS (
    DELETE FROM taskling.task_execution e USING cand WHERE e.id = cand.id
    RETURNING e.id, e.scheduled_for, e.reference_value, cand.class
),
ends AS (DELETE FROM taskling.execution_end x USING del WHERE x.execution_id = del.id),
attempts AS (DELETE FROM taskling.block_attempt a USING del WHERE a.execution_id = del.id),
blocks AS (
    DELETE FROM taskling.block b USING del
    WHERE b.execution_id = del.id AND b.status = 3 AND b.id <> ALL ($8::bigint[])
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
    WHERE task_id = $1 AND status >= 3 AND (reference_value IS NULL OR header IS NOT NULL)
      AND finished_at < clock_timestamp() - CASE WHEN status = 3 THEN $2::interval ELSE $3::interval END
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
	Keep      Retention
	Claimant  string        // "" for none (an operator's dry run)
	Hold      time.Duration // how long each renewal holds the claim
	BatchSize int           // at most MaxCleanupBatch; 0 means MaxCleanupBatch

	protected []int64
	afterAt   time.Time
	afterID   int64
	subsDone  bool
}

// Batch deletes the next batch; done is true when nothing is left to delete.
func (c *Cleaner) Batch(ctx context.Context) (counts CleanupCounts, done bool, err error) {
	size := c.BatchSize
	if size <= 0 || size > MaxCleanupBatch {
		size = MaxCleanupBatch
	}
	if c.protected == nil {
		if err := c.Store.pool.QueryRow(ctx, protectedBlocksSQL, c.TaskID).Scan(&c.protected); err != nil {
			return counts, false, fmt.Errorf("execution: protected blocks of task %d: %w", c.TaskID, err)
		}
		c.afterAt = time.Unix(0, 0).UTC()
	}
	err = pgx.BeginFunc(ctx, c.Store.pool, func(tx pgx.Tx) error {
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
		if _, err := tx.Exec(ctx, forceLockSQL("$1::bigint"), c.TaskID); err != nil {
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
		return CleanupCounts{}, false, fmt.Errorf("execution: clean task %d: %w", c.TaskID, err)
	}
	c.subsDone = counts.Submissions+counts.Compacted < int64(size)
	return counts, c.subsDone && counts.Executions() < int64(size), nil
}

// PlanCleanup counts what a cleanup of the task with keep would delete now, deleting nothing.
func (s *Store) PlanCleanup(ctx context.Context, taskID int64, keep Retention) (CleanupCounts, error) {
	var c CleanupCounts
	err := s.pool.QueryRow(ctx, `
WITH cand AS (`+cleanupCandidatesSQL+`)
SELECT count(*) FILTER (WHERE class = 1), count(*) FILTER (WHERE class = 2), count(*) FILTER (WHERE class = 3),
       count(*) FILTER (WHERE scheduled_for IS NOT NULL) FROM cand`,
		taskID, keep.Completed, keep.Failed, keep.Blocked, time.Unix(0, 0).UTC(), 0, math.MaxInt32).
		Scan(&c.Completed, &c.Failed, &c.Blocked, &c.Instants)
	if err != nil {
		return c, fmt.Errorf("execution: plan the cleanup of task %d: %w", taskID, err)
	}
	err = s.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE reference_value IS NULL), count(*) FILTER (WHERE reference_value IS NOT NULL)
FROM taskling.submission
WHERE task_id = $1 AND status >= 3 AND (reference_value IS NULL OR header IS NOT NULL)
  AND finished_at < clock_timestamp() - CASE WHEN status = 3 THEN $2::interval ELSE $3::interval END`,
		taskID, keep.Completed, keep.Failed).Scan(&c.Submissions, &c.Compacted)
	if err != nil {
		return c, fmt.Errorf("execution: plan the cleanup of task %d: %w", taskID, err)
	}
	return c, nil
}

// ForgottenInstants returns the cron instants in [from, to] of the task's deleted executions.
func (s *Store) ForgottenInstants(ctx context.Context, taskID int64, from, to time.Time) ([]time.Time, error) {
	rows, err := s.pool.Query(ctx, `
SELECT i FROM taskling.forgotten_instants f, unnest(f.instants) AS i
WHERE f.task_id = $1 AND f.last_instant >= $2 AND f.first_instant <= $3 AND i BETWEEN $2 AND $3`, taskID, from, to)
	if err != nil {
		return nil, fmt.Errorf("execution: forgotten instants of task %d: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("execution: forgotten instants of task %d: %w", taskID, err)
	}
	return out, nil
}

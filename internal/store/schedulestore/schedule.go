// Package schedulestore is the storage of schedules (migration 0002): the registration of a cron
// task, its cursor and the events of the instants decided without a run. Claiming an instant is
// part of the grant protocol (execution.ScheduleClaim). Not a stable API.
package schedulestore

import (
	"context"
	"fmt"

	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype/zeronull"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/tasklingtype"
)

// ScheduleDef is a schedule as registered. CatchUp and Overlap are the ordinals of
// taskling.CatchUpPolicy and taskling.OverlapPolicy (stored as ordinal + 1).
type ScheduleDef struct {
	TaskID           int64
	Spec             string
	TimeZone         string
	CatchUp          int
	CatchUpWindow    *time.Duration
	MaxCatchUp       int
	Overlap          int
	MisfireThreshold time.Duration
	Host             string
}

// ScheduleRow is a schedule as stored, with the DB clock when it was read.
type ScheduleRow struct {
	TaskID           int64          `db:"task_id"`
	Spec             string         `db:"spec"`
	TimeZone         string         `db:"time_zone"`
	CatchUp          int            `db:"catch_up"`
	CatchUpWindow    *time.Duration `db:"catch_up_window"`
	MaxCatchUp       int            `db:"max_catch_up"`
	Overlap          int            `db:"overlap"`
	MisfireThreshold time.Duration  `db:"misfire_threshold"`
	Cursor           time.Time      `db:"cursor_at"`
	RegisteredBy     string         `db:"registered_by"`
	ChangedAt        time.Time      `db:"changed_at"`
	// ScheduleRetired and TaskRetired: the schedule, or its whole task, is retired; no
	// instant is claimed while either is.
	ScheduleRetired bool      `db:"schedule_retired"`
	TaskRetired     bool      `db:"task_retired"`
	Now             time.Time `db:"now"`
}

// Retired reports whether no instant of the schedule may be claimed: it or its task is retired.
func (r ScheduleRow) Retired() bool { return r.ScheduleRetired || r.TaskRetired }

// The schedule reads return the row with its policies as ordinals (catch_up and overlap are
// stored as ordinal + 1), whether it or its task is retired, and the database clock.

// lockScheduleSQL reads task $1's schedule and locks it.
const lockScheduleSQL = `
SELECT task_id, spec, time_zone, catch_up - 1 AS catch_up, catch_up_window, max_catch_up,
    overlap - 1 AS overlap, misfire_threshold, cursor_at, registered_by, changed_at, retired_at IS NOT NULL AS schedule_retired,
    EXISTS (SELECT 1 FROM taskling.task_definition t WHERE t.id = task_id AND t.retired_at IS NOT NULL) AS task_retired,
    clock_timestamp() AS now
FROM taskling.schedule WHERE task_id = $1
FOR UPDATE`

// scheduleSQL reads task $1's schedule.
const scheduleSQL = `
SELECT task_id, spec, time_zone, catch_up - 1 AS catch_up, catch_up_window, max_catch_up,
    overlap - 1 AS overlap, misfire_threshold, cursor_at, registered_by, changed_at, retired_at IS NOT NULL AS schedule_retired,
    EXISTS (SELECT 1 FROM taskling.task_definition t WHERE t.id = task_id AND t.retired_at IS NOT NULL) AS task_retired,
    clock_timestamp() AS now
FROM taskling.schedule WHERE task_id = $1`

// insertScheduleSQL creates the schedule row, with the cursor at now; no row when it exists.
const insertScheduleSQL = `
INSERT INTO taskling.schedule (task_id, spec, time_zone, catch_up, catch_up_window, max_catch_up,
    overlap, misfire_threshold, cursor_at, registered_by)
VALUES ($1, $2, $3, $4 + 1, $5, $6, $7 + 1, $8, clock_timestamp(), $9)
ON CONFLICT (task_id) DO NOTHING
RETURNING task_id, spec, time_zone, catch_up - 1 AS catch_up, catch_up_window, max_catch_up,
    overlap - 1 AS overlap, misfire_threshold, cursor_at, registered_by, changed_at, retired_at IS NOT NULL AS schedule_retired,
    EXISTS (SELECT 1 FROM taskling.task_definition t WHERE t.id = task_id AND t.retired_at IS NOT NULL) AS task_retired,
    clock_timestamp() AS now`

// updateScheduleSQL updates a locked schedule row; $10: the spec or zone changed, so the cursor
// moves to max(cursor, now).
const updateScheduleSQL = `
UPDATE taskling.schedule SET
    spec = $2, time_zone = $3, catch_up = $4 + 1, catch_up_window = $5, max_catch_up = $6,
    overlap = $7 + 1, misfire_threshold = $8, registered_by = $9,
    cursor_at = CASE WHEN $10 THEN greatest(cursor_at, clock_timestamp()) ELSE cursor_at END,
    changed_at = CASE WHEN $10 THEN clock_timestamp() ELSE changed_at END
WHERE task_id = $1
RETURNING task_id, spec, time_zone, catch_up - 1 AS catch_up, catch_up_window, max_catch_up,
    overlap - 1 AS overlap, misfire_threshold, cursor_at, registered_by, changed_at, retired_at IS NOT NULL AS schedule_retired,
    EXISTS (SELECT 1 FROM taskling.task_definition t WHERE t.id = task_id AND t.retired_at IS NOT NULL) AS task_retired,
    clock_timestamp() AS now`

// insertScheduleEventsSQL inserts events given as parallel arrays; $1 task, $2 host.
const insertScheduleEventsSQL = `
INSERT INTO taskling.schedule_event (task_id, kind, first_instant, last_instant, instants, detail, host_name)
SELECT $1, e.k, e.f, e.l, e.n, e.d, $2
FROM unnest($3::smallint[], $4::timestamptz[], $5::timestamptz[], $6::bigint[], $7::text[]) WITH ORDINALITY AS e(k, f, l, n, d, o)
ORDER BY e.o`

// advanceScheduleSQL moves the cursor of task $1's schedule from $9 to $8 by compare-and-set and
// records the events ($3–$7, by host $2) with it; it returns no row when the cursor had moved. A
// retired schedule's cursor does not move, so that a claim planned before its retirement fails.
// (The acquire transaction's claim is the same compare-and-set: execution.ScheduleClaim.)
const advanceScheduleSQL = `
WITH u AS (
    UPDATE taskling.schedule SET cursor_at = $8 WHERE task_id = $1 AND cursor_at = $9 AND retired_at IS NULL
    RETURNING task_id
), ev AS (
    INSERT INTO taskling.schedule_event (task_id, kind, first_instant, last_instant, instants, detail, host_name)
    SELECT $1, e.k, e.f, e.l, e.n, e.d, $2
    FROM u, unnest($3::smallint[], $4::timestamptz[], $5::timestamptz[], $6::bigint[], $7::text[]) WITH ORDINALITY AS e(k, f, l, n, d, o)
    ORDER BY e.o
)
SELECT task_id FROM u`

// scheduleEventsSQL reads task $1's last $2 schedule events, newest first (schedule_event_task_idx).
const scheduleEventsSQL = `
SELECT taskling.schedule_event_name(kind) AS kind, first_instant, last_instant, instants, detail, host_name, recorded_at
FROM taskling.schedule_event WHERE task_id = $1
ORDER BY id DESC
LIMIT $2`

func (s *Store) UpsertSchedule(ctx context.Context, def ScheduleDef) (ScheduleRow, error) {
	var row ScheduleRow
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		args := []any{def.TaskID, def.Spec, def.TimeZone, def.CatchUp, def.CatchUpWindow, def.MaxCatchUp,
			def.Overlap, def.MisfireThreshold, def.Host}
		var rows []ScheduleRow
		if err := pgxscan.Select(ctx, tx, &rows, insertScheduleSQL, args...); err != nil {
			return err
		}
		var ev execution.ScheduleEvent
		if len(rows) == 1 {
			row = rows[0]
			ev = execution.ScheduleEvent{Kind: "registered", Detail: fmt.Sprintf("registered %q in %s", def.Spec, def.TimeZone)}
		} else {
			// The row exists (maybe inserted a moment ago by another host): lock it, compare.
			var prev []ScheduleRow
			if err := pgxscan.Select(ctx, tx, &prev, lockScheduleSQL, def.TaskID); err != nil {
				return err
			}
			if len(prev) != 1 {
				return fmt.Errorf("schedule row vanished")
			}
			changed := prev[0].Spec != def.Spec || prev[0].TimeZone != def.TimeZone
			var updated []ScheduleRow
			if err := pgxscan.Select(ctx, tx, &updated, updateScheduleSQL, append(args, changed)...); err != nil {
				return err
			}
			row = updated[0]
			if !changed {
				return nil
			}
			ev = execution.ScheduleEvent{Kind: "changed", Detail: fmt.Sprintf("changed from %q in %s to %q in %s; cursor moved to %s (no catch-up)",
				prev[0].Spec, prev[0].TimeZone, def.Spec, def.TimeZone, row.Cursor.UTC().Format(time.RFC3339Nano))}
		}
		a := execution.ToArrays([]execution.ScheduleEvent{ev})
		_, err := tx.Exec(ctx, insertScheduleEventsSQL, def.TaskID, def.Host, a.Kinds, a.Firsts, a.Lasts, a.Counts, a.Details)
		return err
	})
	if err != nil {
		return row, fmt.Errorf("register schedule of task %d: %w", def.TaskID, err)
	}
	return row, nil
}

// Schedule returns a task's schedule and the DB clock, or ok=false if it has none.
func (s *Store) Schedule(ctx context.Context, taskID int64) (row ScheduleRow, ok bool, err error) {
	var rows []ScheduleRow
	err = pgxscan.Select(ctx, s.db, &rows, scheduleSQL, taskID)
	if err != nil {
		return row, false, fmt.Errorf("schedule of task %d: %w", taskID, err)
	}
	if len(rows) == 0 {
		return row, false, nil
	}
	return rows[0], true, nil
}

// AdvanceSchedule moves a schedule's cursor from expected to next and records events, atomically.
// ok=false: the cursor had moved (another host decided first); nothing was written.
func (s *Store) AdvanceSchedule(ctx context.Context, taskID int64, host string, expected, next time.Time, events []execution.ScheduleEvent) (ok bool, err error) {
	a := execution.ToArrays(events)
	rows, err := s.db.Query(ctx, advanceScheduleSQL, taskID, host, a.Kinds, a.Firsts, a.Lasts, a.Counts, a.Details, next, expected)
	if err != nil {
		return false, fmt.Errorf("advance schedule of task %d: %w", taskID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return false, fmt.Errorf("advance schedule of task %d: %w", taskID, err)
	}
	return len(ids) == 1, nil
}

// ScheduleEvents returns a task's last n schedule events, newest first (schedule_event_task_idx).
// A registration's NULL range and detail read as zero.
func (s *Store) ScheduleEvents(ctx context.Context, taskID int64, n int) ([]tasklingtype.ScheduleEvent, error) {
	rows, err := s.db.Query(ctx, scheduleEventsSQL, taskID, n)
	if err != nil {
		return nil, fmt.Errorf("schedule events of task %d: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.ScheduleEvent, error) {
		var e tasklingtype.ScheduleEvent
		err := row.Scan(&e.Kind, (*zeronull.Timestamptz)(&e.First), (*zeronull.Timestamptz)(&e.Last), &e.Instants,
			(*zeronull.Text)(&e.Detail), &e.Host, &e.RecordedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("schedule events of task %d: %w", taskID, err)
	}
	return out, nil
}

package adminstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/tasklingtype"
)

// Task list filters (TaskListQuery.Status).
const (
	TaskStatusBusy    = "busy"     // slots in use > 0
	TaskStatusAtLimit = "at_limit" // a limited task with every slot in use
	TaskStatusWaiting = "waiting"  // starts queued for a slot
	TaskStatusIdle    = "idle"     // no slot in use and none waiting
	// TaskStatusRetired lists the retired tasks, which every other filter leaves out.
	TaskStatusRetired = "retired"
)

// Task list orders (TaskListQuery.Sort).
const (
	TaskSortName = "name" // application, task name
	TaskSortBusy = "busy" // at the limit first, then most slots in use, then most waiting, then name
)

// TaskKey is a task's place in a sort order: a page's first or last task, where the next page
// (or the previous one) starts. AtLimit, Used and Waiting matter to TaskSortBusy only.
type TaskKey struct {
	AtLimit     bool
	Used        int
	Waiting     int
	Application string
	Task        string
	ID          int64
}

// TaskListQuery selects a page of tasks. The zero value selects every task by name.
type TaskListQuery struct {
	Application string // "" all, else exactly this application
	Search      string // "" all, else a case-insensitive substring of "application/task"
	Status      string // "" all, else one of TaskStatusBusy, …
	Sort        string // "" or TaskSortName, or TaskSortBusy
	// After starts the page after this key; with Backward, the page before it.
	After    *TaskKey
	Backward bool
	Limit    int // 0: every task
}

// TaskList is a page of tasks in the query's order.
type TaskList struct {
	Tasks []tasklingtype.TaskInfo
	// Keys are the tasks' places in the sort order (a cursor is made of one).
	Keys []TaskKey
	// More: tasks follow the page in the direction read (after it, or before it when Backward).
	More bool
	// Total counts the tasks matching the filters, on every page.
	Total int
	// Applications lists every application's name, filters aside.
	Applications []string
}

// The task list statements. Each selects, as CTE m, the tasks matching the filters ($1
// application, $2 search, $3 status), then a page of them in its order from a cursor ($4: none;
// else $5… the key of the page's neighbour, $8 or $11 the limit, NULL: all), and reads the page's
// tasks from taskling.task_summary. Pages are read by key (the sort key and the task id), so tasks
// created between pages neither repeat nor push others out of the next page. The state of every
// task (slots, waiters: taskling.task_state) is computed only when a filter or the order needs it.

// byNameSQL and byNameBackSQL: by name, no state filter.
const (
	byNameSQL = `
WITH m AS (
    SELECT d.id, d.application_name, d.task_name, 0 AS used, 0 AS waiting, false AS at_limit
    FROM taskling.task_definition d
    WHERE ($1 = '' OR d.application_name = $1)
      AND ($2 = '' OR strpos(lower(d.application_name || '/' || d.task_name), lower($2)) > 0)
      AND $3 IN ('', 'retired') AND (d.retired_at IS NOT NULL) = ($3 = 'retired')
), page AS (
    SELECT * FROM m p
    WHERE $4 OR (p.application_name, p.task_name, p.id) > ($5::text, $6::text, $7::bigint)
    ORDER BY p.application_name, p.task_name, p.id
    LIMIT $8
)
SELECT p.at_limit, p.used, (SELECT count(*) FROM m)::int, s.*
FROM page p JOIN taskling.task_summary s ON s.id = p.id
ORDER BY p.application_name, p.task_name, p.id`

	byNameBackSQL = `
WITH m AS (
    SELECT d.id, d.application_name, d.task_name, 0 AS used, 0 AS waiting, false AS at_limit
    FROM taskling.task_definition d
    WHERE ($1 = '' OR d.application_name = $1)
      AND ($2 = '' OR strpos(lower(d.application_name || '/' || d.task_name), lower($2)) > 0)
      AND $3 IN ('', 'retired') AND (d.retired_at IS NOT NULL) = ($3 = 'retired')
), page AS (
    SELECT * FROM m p
    WHERE $4 OR (p.application_name, p.task_name, p.id) < ($5::text, $6::text, $7::bigint)
    ORDER BY p.application_name DESC, p.task_name DESC, p.id DESC
    LIMIT $8
)
SELECT p.at_limit, p.used, (SELECT count(*) FROM m)::int, s.*
FROM page p JOIN taskling.task_summary s ON s.id = p.id
ORDER BY p.application_name DESC, p.task_name DESC, p.id DESC`

	countByNameSQL = `
SELECT count(*) FROM taskling.task_definition d
WHERE ($1 = '' OR d.application_name = $1)
  AND ($2 = '' OR strpos(lower(d.application_name || '/' || d.task_name), lower($2)) > 0)
  AND $3 IN ('', 'retired') AND (d.retired_at IS NOT NULL) = ($3 = 'retired')`
)

// byStateNameSQL and byStateNameBackSQL: by name, filtered by state.
const (
	byStateNameSQL = `
WITH r AS MATERIALIZED (
    SELECT * FROM taskling.task_state t
    WHERE ($1 = '' OR t.application_name = $1)
      AND ($2 = '' OR strpos(lower(t.application_name || '/' || t.task_name), lower($2)) > 0)
      AND t.retired = ($3 = 'retired')
), m AS (
    SELECT * FROM r WHERE CASE $3 WHEN 'busy' THEN r.used > 0 WHEN 'at_limit' THEN r.at_limit
        WHEN 'waiting' THEN r.waiting > 0 WHEN 'idle' THEN r.used = 0 AND r.waiting = 0 ELSE true END
), page AS (
    SELECT * FROM m p
    WHERE $4 OR (p.application_name, p.task_name, p.id) > ($5::text, $6::text, $7::bigint)
    ORDER BY p.application_name, p.task_name, p.id
    LIMIT $8
)
SELECT p.at_limit, p.used, (SELECT count(*) FROM m)::int, s.*
FROM page p JOIN taskling.task_summary s ON s.id = p.id
ORDER BY p.application_name, p.task_name, p.id`

	byStateNameBackSQL = `
WITH r AS MATERIALIZED (
    SELECT * FROM taskling.task_state t
    WHERE ($1 = '' OR t.application_name = $1)
      AND ($2 = '' OR strpos(lower(t.application_name || '/' || t.task_name), lower($2)) > 0)
      AND t.retired = ($3 = 'retired')
), m AS (
    SELECT * FROM r WHERE CASE $3 WHEN 'busy' THEN r.used > 0 WHEN 'at_limit' THEN r.at_limit
        WHEN 'waiting' THEN r.waiting > 0 WHEN 'idle' THEN r.used = 0 AND r.waiting = 0 ELSE true END
), page AS (
    SELECT * FROM m p
    WHERE $4 OR (p.application_name, p.task_name, p.id) < ($5::text, $6::text, $7::bigint)
    ORDER BY p.application_name DESC, p.task_name DESC, p.id DESC
    LIMIT $8
)
SELECT p.at_limit, p.used, (SELECT count(*) FROM m)::int, s.*
FROM page p JOIN taskling.task_summary s ON s.id = p.id
ORDER BY p.application_name DESC, p.task_name DESC, p.id DESC`

	countByStateSQL = `
SELECT count(*) FROM taskling.task_state r
WHERE ($1 = '' OR r.application_name = $1)
  AND ($2 = '' OR strpos(lower(r.application_name || '/' || r.task_name), lower($2)) > 0)
  AND r.retired = ($3 = 'retired')
  AND CASE $3 WHEN 'busy' THEN r.used > 0 WHEN 'at_limit' THEN r.at_limit
      WHEN 'waiting' THEN r.waiting > 0 WHEN 'idle' THEN r.used = 0 AND r.waiting = 0 ELSE true END`
)

// byBusySQL and byBusyBackSQL: at the limit first, then the most slots used, then the most
// waiting, then by name (the key's columns, all ascending: $5 is 0 at the limit, else 1, and $6
// and $7 the negated counts).
const (
	byBusySQL = `
WITH r AS MATERIALIZED (
    SELECT * FROM taskling.task_state t
    WHERE ($1 = '' OR t.application_name = $1)
      AND ($2 = '' OR strpos(lower(t.application_name || '/' || t.task_name), lower($2)) > 0)
      AND t.retired = ($3 = 'retired')
), m AS (
    SELECT * FROM r WHERE CASE $3 WHEN 'busy' THEN r.used > 0 WHEN 'at_limit' THEN r.at_limit
        WHEN 'waiting' THEN r.waiting > 0 WHEN 'idle' THEN r.used = 0 AND r.waiting = 0 ELSE true END
), page AS (
    SELECT * FROM m p
    WHERE $4 OR (CASE WHEN p.at_limit THEN 0 ELSE 1 END, -p.used, -p.waiting, p.application_name, p.task_name, p.id)
        > ($5::int, $6::int, $7::int, $8::text, $9::text, $10::bigint)
    ORDER BY CASE WHEN p.at_limit THEN 0 ELSE 1 END, -p.used, -p.waiting, p.application_name, p.task_name, p.id
    LIMIT $11
)
SELECT p.at_limit, p.used, (SELECT count(*) FROM m)::int, s.*
FROM page p JOIN taskling.task_summary s ON s.id = p.id
ORDER BY CASE WHEN p.at_limit THEN 0 ELSE 1 END, -p.used, -p.waiting, p.application_name, p.task_name, p.id`

	byBusyBackSQL = `
WITH r AS MATERIALIZED (
    SELECT * FROM taskling.task_state t
    WHERE ($1 = '' OR t.application_name = $1)
      AND ($2 = '' OR strpos(lower(t.application_name || '/' || t.task_name), lower($2)) > 0)
      AND t.retired = ($3 = 'retired')
), m AS (
    SELECT * FROM r WHERE CASE $3 WHEN 'busy' THEN r.used > 0 WHEN 'at_limit' THEN r.at_limit
        WHEN 'waiting' THEN r.waiting > 0 WHEN 'idle' THEN r.used = 0 AND r.waiting = 0 ELSE true END
), page AS (
    SELECT * FROM m p
    WHERE $4 OR (CASE WHEN p.at_limit THEN 0 ELSE 1 END, -p.used, -p.waiting, p.application_name, p.task_name, p.id)
        < ($5::int, $6::int, $7::int, $8::text, $9::text, $10::bigint)
    ORDER BY CASE WHEN p.at_limit THEN 0 ELSE 1 END DESC, -p.used DESC, -p.waiting DESC,
        p.application_name DESC, p.task_name DESC, p.id DESC
    LIMIT $11
)
SELECT p.at_limit, p.used, (SELECT count(*) FROM m)::int, s.*
FROM page p JOIN taskling.task_summary s ON s.id = p.id
ORDER BY CASE WHEN p.at_limit THEN 0 ELSE 1 END DESC, -p.used DESC, -p.waiting DESC,
    p.application_name DESC, p.task_name DESC, p.id DESC`
)

// ListTasks returns a page of the tasks q selects in its order, with their count and every
// application's name.
func (s *Store) ListTasks(ctx context.Context, q TaskListQuery) (TaskList, error) {
	switch q.Status {
	case "", TaskStatusBusy, TaskStatusAtLimit, TaskStatusWaiting, TaskStatusIdle, TaskStatusRetired:
	default:
		return TaskList{}, fmt.Errorf("list tasks: unknown status filter %q", q.Status)
	}
	var limit *int
	if q.Limit > 0 {
		n := q.Limit + 1
		limit = &n
	}
	k := TaskKey{}
	if q.After != nil {
		k = *q.After
	}
	args := []any{q.Application, q.Search, q.Status, q.After == nil}
	var sql, countSQL string
	switch q.Sort {
	case "", TaskSortName:
		sql, countSQL = byStateNameSQL, countByStateSQL
		if q.Status == "" || q.Status == TaskStatusRetired {
			sql, countSQL = byNameSQL, countByNameSQL
		}
		if q.Backward {
			sql = map[string]string{byNameSQL: byNameBackSQL, byStateNameSQL: byStateNameBackSQL}[sql]
		}
		args = append(args, k.Application, k.Task, k.ID, limit)
	case TaskSortBusy:
		sql, countSQL = byBusySQL, countByStateSQL
		if q.Backward {
			sql = byBusyBackSQL
		}
		atLimit := 1
		if k.AtLimit {
			atLimit = 0
		}
		args = append(args, atLimit, -k.Used, -k.Waiting, k.Application, k.Task, k.ID, limit)
	default:
		return TaskList{}, fmt.Errorf("list tasks: unknown sort %q", q.Sort)
	}
	out, err := s.readTaskPage(ctx, sql, args)
	if err != nil {
		return TaskList{}, fmt.Errorf("list tasks: %w", err)
	}
	if q.Limit > 0 && len(out.Tasks) > q.Limit {
		out.Tasks, out.Keys, out.More = out.Tasks[:q.Limit], out.Keys[:q.Limit], true
	}
	if q.Backward {
		slices.Reverse(out.Tasks)
		slices.Reverse(out.Keys)
	}
	if len(out.Tasks) == 0 && q.After != nil {
		// An empty page past the end: the tasks matching the filters are counted still.
		if err := s.db.QueryRow(ctx, countSQL, args[:3]...).Scan(&out.Total); err != nil {
			return TaskList{}, fmt.Errorf("count tasks: %w", err)
		}
	}
	if err := pgxscan.Select(ctx, s.db, &out.Applications, `SELECT DISTINCT application_name FROM taskling.task_definition ORDER BY 1`); err != nil {
		return TaskList{}, fmt.Errorf("list applications: %w", err)
	}
	return out, nil
}

// readTaskPage runs a task list statement.
func (s *Store) readTaskPage(ctx context.Context, sql string, args []any) (TaskList, error) {
	var out TaskList
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// The per-task subqueries push the estimate past jit_above_cost: JIT then compiles for
		// 230–580 ms on each connection's first calls of a query that runs in milliseconds.
		if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
			var k TaskKey
			t, id, err := scanSummary(row, &k.AtLimit, &k.Used, &out.Total)
			if err != nil {
				return struct{}{}, err
			}
			k.Waiting, k.Application, k.Task, k.ID = t.Waiting, t.Application, t.Task, id
			out.Tasks = append(out.Tasks, t)
			out.Keys = append(out.Keys, k)
			return struct{}{}, nil
		})
		if err != nil {
			return err
		}
		ids := make([]int64, len(out.Keys))
		for i, k := range out.Keys {
			ids[i] = k.ID
		}
		rates, err := s.readRateStates(ctx, tx, ids, nil)
		if err != nil {
			return err
		}
		queued, err := readQueued(ctx, tx, ids)
		for i := range out.Tasks {
			applyTaskRates(&out.Tasks[i], rates[ids[i]])
			out.Tasks[i].QueuedSubmissions = queued[ids[i]]
		}
		return err
	})
	return out, err
}

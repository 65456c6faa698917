package execution

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/georgysavva/scany/v2/pgxscan"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/tokens"
)

// Read-only queries for operators (the CLI, the HTTP API, metrics). They never take the task
// row's lock, so they cannot slow the acquire path down; what they report is a snapshot judged
// on the DB clock at the moment they run.

// Sources of the limit in force (TaskSummary.LimitSource; taskling.LimitSource's values).
const (
	limitSourceOverride = "override" // an operator's override stored in the task row
	limitSourceDeclared = "declared" // the limit last declared by a requester (its code or config)
	limitSourceNone     = "none"     // nothing declared yet: the task row exists but was never acquired
)

// TaskSummary is one task as `tasks list` shows it.
type TaskSummary struct {
	ID          int64
	Application string
	Task        string
	// Limit in force: the operator's override if set, else the last requester's declared limit;
	// -1 unlimited, 0 when LimitSource is LimitSourceNone.
	Limit int
	// LimitSource is "override", "declared" or "none".
	LimitSource   string
	DeclaredLimit *int
	DeclaredBy    *string
	// Dispute is the last time a host's declaration replaced a different limit declared by
	// another host, within DisputeWindow; nil if none.
	Dispute *Dispute
	// SlotsUsed counts the slots held by live executions (for an unlimited task: its live
	// executions); SlotsTotal is the limit in force (-1 unlimited), which the token list — and
	// so TaskSlots — matches from the next acquisition on.
	SlotsUsed  int
	SlotsTotal int
	// SlotsRetiring counts held slots marked for removal after a lowered limit.
	SlotsRetiring int
	Fence         int64
	Overrides     Overrides
	// LastExecution is the newest execution of the task, granted or denied; nil if none.
	LastExecution *LastExecution
	// Waiting counts the live waiters queued for a slot; OldestWait is when the oldest of them
	// queued (zero if none).
	Waiting    int
	OldestWait time.Time
	// Retired: the task is retired (nil if not); ScheduleRetired: its schedule is. Overrides
	// hold a retired task's enabled override as it was set (its row says disabled).
	Retired         *Retirement
	HasSchedule     bool
	ScheduleRetired *Retirement
	// Declaration is what the task's hosts last declared beyond the limit (nil: nothing yet).
	Declaration *DeclaredSettings
}

// Dispute is a declaration of a task's limit that another host's replaced.
type Dispute struct {
	Limit int
	Host  string
	At    time.Time // when it was replaced, on the database clock
}

// DisputeWindow is how long a disagreement between hosts' declarations is reported.
const DisputeWindow = 10 * time.Minute

// RecordDispute records that host declared limit for a task whose declaration by another host
// was a different one (AcquireResult.ConflictingDeclaration). Outside any token transaction.
func (s *Store) RecordDispute(ctx context.Context, taskID int64, other Declaration, limit int, host string) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO taskling.declaration_dispute (task_id, other_limit, other_host, declared_limit, declared_by)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (task_id) DO UPDATE SET other_limit = excluded.other_limit, other_host = excluded.other_host,
    declared_limit = excluded.declared_limit, declared_by = excluded.declared_by, at = clock_timestamp()`,
		taskID, other.Limit, other.Host, limit, host)
	if err != nil {
		return fmt.Errorf("execution: record the disagreement on task %d: %w", taskID, err)
	}
	return nil
}

// LastExecution is the newest execution of a task.
type LastExecution struct {
	ID        int64
	Status    string
	StartedAt time.Time
}

// holdsSQL tells whether execution e (executionFrom) still holds a slot: not ended, and alive.
var holdsSQL = `(x.execution_id IS NULL AND e.completed_at IS NULL AND e.reclaimed_at IS NULL AND NOT e.blocked AND ` + aliveSQL + `)`

// possibleHoldersSQL lists the ids of the executions that may hold a slot of task d: the token
// list's grantees and the executions the holders column names (an unlimited task's holders).
const possibleHoldersSQL = `(SELECT m[1]::bigint FROM regexp_matches(d.tokens || '|' || d.holders, '(?:G|E):([0-9]+)', 'g') m)`

// liveTicketsSQL counts the live tickets of task d's queue and finds the oldest one's queueing time.
const liveTicketsSQL = `SELECT count(*) AS waiting, min(q.queued) AS oldest FROM (` + liveTicketRowsSQL + `) q`

// summarySQL reads the task rows with the liveness of their possible holders (by primary key)
// and their newest execution (task_execution_task_started_idx).
var summarySQL = `
SELECT d.id, d.application_name, d.task_name, d.tokens, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.overrides_updated_at, d.declared_limit, d.declared_by,
    dd.other_limit, dd.other_host, dd.at,
    coalesce(h.ids, '{}'), coalesce(h.alive, '{}'),
    l.id, l.status, l.started_at, w.waiting, w.oldest,
    d.retired_at, d.retired_by, d.retired_enabled, sc.task_id IS NOT NULL, sc.retired_at, sc.retired_by,
    td.enabled, td.death_mode, td.keep_alive_interval, td.keep_alive_death_threshold, td.override_threshold,
    td.declared_by, td.declared_at
FROM taskling.task_definition d
LEFT JOIN taskling.schedule sc ON sc.task_id = d.id
LEFT JOIN taskling.task_declaration td ON td.task_id = d.id
LEFT JOIN taskling.declaration_dispute dd
    ON dd.task_id = d.id AND clock_timestamp() - dd.at < ` + fmt.Sprintf("interval '%d seconds'", int(DisputeWindow.Seconds())) + `
LEFT JOIN LATERAL (` + liveTicketsSQL + `) w ON true
LEFT JOIN LATERAL (
    SELECT array_agg(e.id ORDER BY e.id) AS ids, array_agg(` + holdsSQL + ` ORDER BY e.id) AS alive
    FROM ` + executionFrom + `
    WHERE e.id IN ` + possibleHoldersSQL + `
) h ON true
LEFT JOIN LATERAL (
    SELECT e.id, ` + statusSQL + ` AS status, e.started_at
    FROM ` + executionFrom + ` WHERE e.task_id = d.id ORDER BY e.started_at DESC, e.id DESC LIMIT 1
) l ON true`

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
	Tasks []TaskSummary
	// Keys are the tasks' places in the sort order (a cursor is made of one).
	Keys []TaskKey
	// More: tasks follow the page in the direction read (after it, or before it when Backward).
	More bool
	// Total counts the tasks matching the filters, on every page.
	Total int
	// Applications lists every application's name, filters aside.
	Applications []string
}

// slotsSQL computes, per task d, the slots in use by live executions and the number of slots
// (the limit in force, or the token list's when nothing was declared), as scanSummary does from
// the token list and its possible holders: filters and sorts run in SQL.
var slotsSQL = `
SELECT CASE WHEN k.unlimited THEN (SELECT count(*) FROM ` + executionFrom + ` WHERE e.id IN ` + possibleHoldersSQL + ` AND ` + holdsSQL + `)
            ELSE (SELECT count(*) FROM ` + executionFrom + ` JOIN unnest(k.grantees) g(id) ON g.id = e.id WHERE ` + holdsSQL + `) END AS used,
       CASE WHEN d.concurrency_limit IS NOT NULL THEN d.concurrency_limit
            WHEN d.declared_limit IS NOT NULL THEN d.declared_limit
            WHEN k.unlimited THEN -1 ELSE k.sized END AS total
FROM (SELECT coalesce(bool_and(t.s = '3') AND count(*) = 1, false) AS unlimited,
             count(*) FILTER (WHERE t.s IN ('0', '1')) AS sized,
             coalesce(array_agg(t.g) FILTER (WHERE t.s IN ('0', '2') AND t.g <> 0), '{}') AS grantees
      FROM (SELECT (regexp_match(x, 'S:([0-9])'))[1] AS s, (regexp_match(x, 'G:([0-9]+)'))[1]::bigint AS g
            FROM unnest(string_to_array(nullif(d.tokens, ''), '|')) x) t) k`

// taskFilterSQL selects the tasks matching the filters ($1 application, $2 search, $3 status)
// with their sort keys, as CTE m.
var taskFilterSQL = `
WITH r AS MATERIALIZED (
    SELECT d.id, d.application_name, d.task_name, k.used::int AS used, k.total::int AS total,
        w.waiting::int AS waiting, k.total > 0 AND k.used >= k.total AS at_limit
    FROM taskling.task_definition d
    CROSS JOIN LATERAL (` + slotsSQL + `) k
    CROSS JOIN LATERAL (` + liveTicketsSQL + `) w
    WHERE ($1 = '' OR d.application_name = $1)
      AND ($2 = '' OR strpos(lower(d.application_name || '/' || d.task_name), lower($2)) > 0)
      AND (d.retired_at IS NOT NULL) = ($3 = '` + TaskStatusRetired + `')
), m AS (
    SELECT * FROM r WHERE CASE $3
        WHEN '` + TaskStatusBusy + `' THEN r.used > 0
        WHEN '` + TaskStatusAtLimit + `' THEN r.at_limit
        WHEN '` + TaskStatusWaiting + `' THEN r.waiting > 0
        WHEN '` + TaskStatusIdle + `' THEN r.used = 0 AND r.waiting = 0
        ELSE true END
)`

// taskNamesSQL is taskFilterSQL for a query that neither filters nor sorts by state (but for
// retirement): the slots and waiters are then read for the page's tasks only (by summarySQL),
// not for every task.
const taskNamesSQL = `
WITH m AS (
    SELECT d.id, d.application_name, d.task_name, 0 AS used, 0 AS waiting, false AS at_limit
    FROM taskling.task_definition d
    WHERE ($1 = '' OR d.application_name = $1)
      AND ($2 = '' OR strpos(lower(d.application_name || '/' || d.task_name), lower($2)) > 0)
      AND $3 IN ('', '` + TaskStatusRetired + `') AND (d.retired_at IS NOT NULL) = ($3 = '` + TaskStatusRetired + `')
)`

// ListTasks returns a page of the tasks q selects in its order, with their count and every
// application's name. Pages are read by key (the sort key and the task id), so tasks created
// between pages neither repeat nor push others out of the next page.
func (s *Store) ListTasks(ctx context.Context, q TaskListQuery) (TaskList, error) {
	// The sort key's columns, all ascending (TaskSortBusy: at the limit first, then the most
	// slots used, then the most waiting), and the cursor's values for them.
	cols := []string{"p.application_name", "p.task_name", "p.id"}
	types := []string{"text", "text", "bigint"}
	args := []any{q.Application, q.Search, q.Status}
	var vals []any
	if k := q.After; k != nil {
		vals = []any{k.Application, k.Task, k.ID}
	}
	switch q.Sort {
	case "", TaskSortName:
	case TaskSortBusy:
		cols = append([]string{"(CASE WHEN p.at_limit THEN 0 ELSE 1 END)", "-p.used", "-p.waiting"}, cols...)
		types = append([]string{"int", "int", "int"}, types...)
		if k := q.After; k != nil {
			atLimit := 1
			if k.AtLimit {
				atLimit = 0
			}
			vals = append([]any{atLimit, -k.Used, -k.Waiting}, vals...)
		}
	default:
		return TaskList{}, fmt.Errorf("execution: list tasks: unknown sort %q", q.Sort)
	}
	switch q.Status {
	case "", TaskStatusBusy, TaskStatusAtLimit, TaskStatusWaiting, TaskStatusIdle, TaskStatusRetired:
	default:
		return TaskList{}, fmt.Errorf("execution: list tasks: unknown status filter %q", q.Status)
	}
	where := "true"
	if vals != nil {
		params := make([]string, len(vals))
		for i, v := range vals {
			args = append(args, v)
			params[i] = fmt.Sprintf("$%d::%s", len(args), types[i])
		}
		op := ">"
		if q.Backward {
			op = "<"
		}
		where = "(" + strings.Join(cols, ", ") + ") " + op + " (" + strings.Join(params, ", ") + ")"
	}
	order := strings.Join(cols, ", ")
	if q.Backward {
		order = strings.Join(cols, " DESC, ") + " DESC"
	}
	limit := "ALL"
	if q.Limit > 0 {
		limit = fmt.Sprint(q.Limit + 1)
	}
	filterSQL := taskFilterSQL
	if (q.Status == "" || q.Status == TaskStatusRetired) && q.Sort != TaskSortBusy {
		filterSQL = taskNamesSQL
	}
	// The summaries (liveness of holders, newest execution) are read for the page's tasks only.
	sql := filterSQL + `, page AS (
    SELECT * FROM m p WHERE ` + where + ` ORDER BY ` + order + ` LIMIT ` + limit + `
)
SELECT p.at_limit, p.used, (SELECT count(*) FROM m)::int, s.*
FROM page p
CROSS JOIN LATERAL (` + summarySQL + ` WHERE d.id = p.id) s
ORDER BY ` + order
	var out TaskList
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
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
			t, err := scanSummaryWith(row, &k.AtLimit, &k.Used, &out.Total)
			if err != nil {
				return struct{}{}, err
			}
			k.Waiting, k.Application, k.Task, k.ID = t.Waiting, t.Application, t.Task, t.ID
			out.Tasks = append(out.Tasks, t)
			out.Keys = append(out.Keys, k)
			return struct{}{}, nil
		})
		return err
	})
	if err != nil {
		return TaskList{}, fmt.Errorf("execution: list tasks: %w", err)
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
		if err := s.pool.QueryRow(ctx, filterSQL+` SELECT count(*) FROM m`, args[:3]...).Scan(&out.Total); err != nil {
			return TaskList{}, fmt.Errorf("execution: count tasks: %w", err)
		}
	}
	if err := pgxscan.Select(ctx, s.pool, &out.Applications, `SELECT DISTINCT application_name FROM taskling.task_definition ORDER BY 1`); err != nil {
		return TaskList{}, fmt.Errorf("execution: list applications: %w", err)
	}
	return out, nil
}

// TaskSummary returns one task, or ok=false if it does not exist.
func (s *Store) TaskSummary(ctx context.Context, app, task string) (TaskSummary, bool, error) {
	rows, err := s.pool.Query(ctx, summarySQL+` WHERE d.application_name = $1 AND d.task_name = $2`, app, task)
	if err != nil {
		return TaskSummary{}, false, fmt.Errorf("execution: task %s/%s: %w", app, task, err)
	}
	out, err := pgx.CollectRows(rows, scanSummary)
	if err != nil {
		return TaskSummary{}, false, fmt.Errorf("execution: task %s/%s: %w", app, task, err)
	}
	if len(out) == 0 {
		return TaskSummary{}, false, nil
	}
	return out[0], true, nil
}

func scanSummary(row pgx.CollectableRow) (TaskSummary, error) { return scanSummaryWith(row) }

// scanSummaryWith scans a summary row after the leading columns into lead.
func scanSummaryWith(row pgx.CollectableRow, lead ...any) (TaskSummary, error) {
	var (
		t          TaskSummary
		tokenText  string
		ids        []int64
		alive      []bool
		lastID     *int64
		lastStatus *string
		lastAt     *time.Time
		oldest     *time.Time
		dLimit     *int
		dBy        *string
		dAt        *time.Time
		rAt, sAt   *time.Time
		rBy, sBy   *string
		rEnabled   *bool
		decl       declaredColumns
	)
	err := row.Scan(append(lead, &t.ID, &t.Application, &t.Task, &tokenText, &t.Fence,
		&t.Overrides.ConcurrencyLimit, &t.Overrides.Enabled, &t.Overrides.DeathMode, &t.Overrides.KeepAliveInterval,
		&t.Overrides.KeepAliveDeathThreshold, &t.Overrides.OverrideThreshold, &t.Overrides.UpdatedAt,
		&t.DeclaredLimit, &t.DeclaredBy, &dLimit, &dBy, &dAt, &ids, &alive, &lastID, &lastStatus, &lastAt, &t.Waiting, &oldest,
		&rAt, &rBy, &rEnabled, &t.HasSchedule, &sAt, &sBy, &decl.enabled, &decl.mode, &decl.interval, &decl.threshold,
		&decl.overrideThreshold, &decl.by, &decl.at)...)
	if err != nil {
		return t, err
	}
	t.Declaration = decl.settings()
	t.Retired, t.ScheduleRetired = retirementOf(rAt, rBy), retirementOf(sAt, sBy)
	if t.Retired != nil {
		t.Overrides.Enabled = rEnabled // the override as set; the row says disabled while retired
	}
	switch {
	case t.Overrides.ConcurrencyLimit != nil:
		t.Limit, t.LimitSource = *t.Overrides.ConcurrencyLimit, limitSourceOverride
	case t.DeclaredLimit != nil:
		t.Limit, t.LimitSource = *t.DeclaredLimit, limitSourceDeclared
	default:
		t.LimitSource = limitSourceNone
	}
	if oldest != nil {
		t.OldestWait = *oldest
	}
	if dLimit != nil && dAt != nil {
		t.Dispute = &Dispute{Limit: *dLimit, At: *dAt}
		if dBy != nil {
			t.Dispute.Host = *dBy
		}
	}
	if lastID != nil {
		t.LastExecution = &LastExecution{ID: *lastID, Status: *lastStatus, StartedAt: *lastAt}
	}
	list, err := tokens.Parse(tokenText)
	if err != nil {
		return t, fmt.Errorf("task %s/%s: stored token list: %w", t.Application, t.Task, err)
	}
	live := map[int64]bool{}
	liveCount := 0
	for i, id := range ids {
		live[id] = alive[i]
		if alive[i] {
			liveCount++
		}
	}
	// The token list is reconciled to the limit in force by the next acquisition; report the
	// limit in force, so that a changed limit shows at once.
	t.SlotsTotal = list.Limit()
	if t.LimitSource != limitSourceNone {
		t.SlotsTotal = t.Limit
	}
	if list.IsUnlimited() {
		t.SlotsUsed = liveCount
	} else {
		t.SlotsUsed = list.InUse(func(id int64) bool { return live[id] })
	}
	for _, tok := range list.Tokens {
		if tok.Status == tokens.Retiring {
			t.SlotsRetiring++
		}
	}
	return t, nil
}

// Slot is one slot of a task and its holder, as `tasks show` shows it.
type Slot struct {
	TokenID uuid.UUID
	// Status of the token: "held", "available", "retiring" or "unlimited" (one slot per running
	// execution of an unlimited task).
	Status string
	Holder *Holder // nil for an available slot
}

// Holder is the execution a slot was granted to, judged on the DB clock.
type Holder struct {
	ExecutionID int64
	// Found is false when the execution row is missing (the acquire then treats the slot as
	// free); the other fields are then zero.
	Found         bool
	Host          string
	StartedAt     time.Time
	LastKeepAlive time.Time
	HeartbeatAge  time.Duration // DB clock now − last heartbeat
	Alive         bool
	Fence         int64
	ItemsDone     int64 // 0 when not set
	ItemsTotal    int64
}

var holderSQL = `
SELECT e.id, e.host_name, e.started_at, ` + lastHeartbeatSQL + `,
    (extract(epoch FROM clock_timestamp() - ` + lastHeartbeatSQL + `) * 1000000)::bigint,
    ` + holdsSQL + `, coalesce(e.fence, 0), coalesce(e.items_done, 0), coalesce(e.items_total, 0)
FROM ` + executionFrom + `
WHERE e.id = ANY($1)
ORDER BY e.id`

// TaskSlots returns the slots of a task with their holders, in token-list order (for an
// unlimited task: one slot per execution that may hold it). The token list and the holders are
// read in one snapshot.
func (s *Store) TaskSlots(ctx context.Context, taskID int64) ([]Slot, error) {
	var out []Slot
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var text, holdersText string
		if err := tx.QueryRow(ctx, `SELECT tokens, holders FROM taskling.task_definition WHERE id = $1`, taskID).Scan(&text, &holdersText); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		list, err := tokens.Parse(text)
		if err != nil {
			return fmt.Errorf("stored token list: %w", err)
		}
		terms, err := parseTerms(holdersText)
		if err != nil {
			return fmt.Errorf("stored holders: %w", err)
		}
		unlimited := list.IsUnlimited()
		ids := list.Grantees()
		if unlimited {
			ids = ids[:0]
			for _, t := range terms {
				ids = append(ids, t.exec)
			}
		}
		rows, err := tx.Query(ctx, holderSQL, ids)
		if err != nil {
			return err
		}
		holders := map[int64]*Holder{}
		var order []int64
		for rows.Next() {
			h := &Holder{Found: true}
			var ageUS int64
			if err := rows.Scan(&h.ExecutionID, &h.Host, &h.StartedAt, &h.LastKeepAlive, &ageUS, &h.Alive,
				&h.Fence, &h.ItemsDone, &h.ItemsTotal); err != nil {
				rows.Close()
				return err
			}
			h.HeartbeatAge = time.Duration(ageUS) * time.Microsecond
			holders[h.ExecutionID] = h
			order = append(order, h.ExecutionID)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if unlimited {
			for _, id := range order {
				out = append(out, Slot{TokenID: list.Tokens[0].ID, Status: tokens.Unlimited.String(), Holder: holders[id]})
			}
			return nil
		}
		for _, tok := range list.Tokens {
			slot := Slot{TokenID: tok.ID, Status: tok.Status.String()}
			if (tok.Status == tokens.Held || tok.Status == tokens.Retiring) && tok.Grantee != 0 {
				if h, ok := holders[tok.Grantee]; ok {
					slot.Holder = h
				} else {
					slot.Holder = &Holder{ExecutionID: tok.Grantee}
				}
			}
			out = append(out, slot)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("execution: slots of task %d: %w", taskID, err)
	}
	return out, nil
}

// ExecutionsQuery selects a page of a task's executions, newest first.
type ExecutionsQuery struct {
	TaskID int64
	// Status keeps only executions with this derived status ("" = all).
	Status string
	// BeforeID keeps only executions with a smaller id (0 = from the newest): pass the previous
	// page's last id to get the next page.
	BeforeID int64
	Limit    int
}

// executionsPageSQL walks task_execution_task_started_idx (task_id, started_at DESC, id DESC)
// from the cursor (the execution $2, a page's last); the status filter is applied to the rows it
// walks, since the status is derived.
var executionsPageSQL = `
SELECT * FROM (
    SELECT ` + executionColumns + `
    FROM ` + executionFrom + `
    WHERE e.task_id = $1 AND ($2 = 0 OR (e.started_at, e.id) <
        (SELECT c.started_at, c.id FROM taskling.task_execution c WHERE c.id = $2))
) page
WHERE ($3 = '' OR page.status = $3)
ORDER BY page.started_at DESC, page.id DESC
LIMIT $4`

// Executions returns a page of a task's executions, newest first, and whether more follow.
func (s *Store) Executions(ctx context.Context, q ExecutionsQuery) (rows []ExecutionRow, more bool, err error) {
	if q.Limit < 1 {
		return nil, false, fmt.Errorf("execution: executions page limit is %d; want at least 1", q.Limit)
	}
	if err := pgxscan.Select(ctx, s.pool, &rows, executionsPageSQL, q.TaskID, q.BeforeID, q.Status, q.Limit+1); err != nil {
		return nil, false, fmt.Errorf("execution: executions of task %d: %w", q.TaskID, err)
	}
	if len(rows) > q.Limit {
		return rows[:q.Limit], true, nil
	}
	return rows, false, nil
}

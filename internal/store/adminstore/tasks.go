package adminstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype/zeronull"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/tasklingtype"
	"github.com/taskling-go/taskling/tokens"
)

// Read-only queries for operators (the CLI, the HTTP API, metrics). They never take the task
// row's lock, so they cannot slow the acquire path down; what they report is a snapshot judged
// on the DB clock at the moment they run.

// DisputeWindow is how long a disagreement between hosts' declarations is reported.
const DisputeWindow = 10 * time.Minute

// RecordDispute records that host declared limit for a task whose declaration by another host
// was a different one (AcquireResult.ConflictingDeclaration). Outside any token transaction.
func (s *Store) RecordDispute(ctx context.Context, taskID int64, other execution.Declaration, limit int, host string) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO taskling.declaration_dispute (task_id, other_limit, other_host, declared_limit, declared_by)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (task_id) DO UPDATE SET other_limit = excluded.other_limit, other_host = excluded.other_host,
    declared_limit = excluded.declared_limit, declared_by = excluded.declared_by, at = clock_timestamp()`,
		taskID, other.Limit, other.Host, limit, host)
	if err != nil {
		return fmt.Errorf("record the disagreement on task %d: %w", taskID, err)
	}
	return nil
}

// taskSummarySQL reads one task as the task lists do.
const taskSummarySQL = `SELECT * FROM taskling.task_summary WHERE application_name = $1 AND task_name = $2`

// TaskDetail returns one task with its slots and at most maxKeys of its keys, and its id; id 0 if
// it does not exist. Everything is read in one snapshot (a read-only REPEATABLE READ transaction),
// and SlotsUsed counts the slots read whose holder is alive, so that the summary and the slots
// always agree (read apart, a start or an end between the reads made them differ).
func (s *Store) TaskDetail(ctx context.Context, app, task string, maxKeys int) (tasklingtype.TaskDetail, int64, error) {
	var d tasklingtype.TaskDetail
	var id int64
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, taskSummarySQL, app, task)
		if err != nil {
			return err
		}
		if rows.Next() {
			d.TaskInfo, id, err = scanSummary(rows)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil || id == 0 {
			return err
		}
		rates, err := s.readRateStates(ctx, tx, []int64{id}, nil)
		if err != nil {
			return err
		}
		applyTaskRates(&d.TaskInfo, rates[id])
		queued, err := readQueued(ctx, tx, []int64{id})
		if err != nil {
			return err
		}
		d.QueuedSubmissions = queued[id]
		if d.Slots, err = taskSlots(ctx, tx, id); err != nil {
			return fmt.Errorf("slots: %w", err)
		}
		d.SlotsUsed = slotsInUse(d.Slots)
		if d.Keys, d.KeysTotal, err = s.taskKeys(ctx, tx, id, maxKeys); err != nil {
			return fmt.Errorf("keys: %w", err)
		}
		return nil
	})
	if err != nil {
		return tasklingtype.TaskDetail{}, 0, fmt.Errorf("task %s/%s: %w", app, task, err)
	}
	return d, id, nil
}

// slotsInUse counts the slots whose holder is alive: as the token list counts its slots in use
// (tokens.List.InUse) from the same read.
func slotsInUse(slots []tasklingtype.Slot) int {
	n := 0
	for _, sl := range slots {
		if sl.Holder != nil && sl.Holder.Alive {
			n++
		}
	}
	return n
}

// queuedSQL counts tasks $1's submissions waiting to start, from taskling.submission_tally
// (migration 0021) as the metrics' taskling_submissions gauge does: the tally's rows follow the
// tasks and the changes since its last compaction, not the submissions kept (the client compacts
// it before it reads). A seq scan of that small table, whichever tasks are asked.
const queuedSQL = `
SELECT t.task_id, sum(t.n)::bigint FROM taskling.submission_tally t
WHERE t.task_id = ANY($1) AND t.status = taskling.submission_status('waiting')
GROUP BY t.task_id`

// readQueued returns the submissions waiting to start of each of the tasks ids (none: absent).
func readQueued(ctx context.Context, q querier, ids []int64) (map[int64]int, error) {
	out := map[int64]int{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, queuedSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("queued submissions: %w", err)
	}
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		var id, n int64
		err := row.Scan(&id, &n)
		out[id] = int(max(n, 0))
		return struct{}{}, err
	})
	if err != nil {
		return nil, fmt.Errorf("queued submissions: %w", err)
	}
	return out, nil
}

// scanSummary scans a row of taskling.task_summary after the leading columns into lead, and
// returns the task and its id. The limit and the enabled state in force, where each comes from,
// the slots in use and whether the overrides fit the last declaration are judged here, from the
// row's columns.
func scanSummary(row pgx.Row, lead ...any) (tasklingtype.TaskInfo, int64, error) {
	var (
		t                  tasklingtype.TaskInfo
		id                 int64
		tokenText          string
		o                  execution.Overrides
		dLimit, otherLimit *int
		dBy, otherBy       *string
		otherAt            *time.Time
		ids                []int64
		alive              []bool
		lastID             *int64
		lastStatus         *string
		lastAt             *time.Time
		rAt, sAt           *time.Time
		rBy, sBy           *string
		rEnabled           *bool
		decl               declaredColumns
		keys               keyColumns
	)
	err := row.Scan(append(lead, &id, &t.Application, &t.Task, &tokenText, &t.Fence,
		&o.ConcurrencyLimit, &o.Enabled, &o.DeathMode, &o.KeepAliveInterval, &o.KeepAliveDeathThreshold, &o.OverrideThreshold,
		&o.UpdatedAt, &dLimit, &dBy, &otherLimit, &otherBy, &otherAt, &ids, &alive, &lastID, &lastStatus, &lastAt, &t.Waiting,
		(*zeronull.Timestamptz)(&t.OldestWaitSince), &rAt, &rBy, &rEnabled, &t.HasSchedule, &sAt, &sBy,
		&decl.enabled, &decl.mode, &decl.interval, &decl.threshold, &decl.overrideThreshold, &decl.by, &decl.at,
		&keys.holders, &keys.keyHolders, &o.KeyLimit, &keys.overrides, &keys.declaredLimit, &keys.declared, &t.KeysWaiting)...)
	if err != nil {
		return t, 0, err
	}
	switch {
	case o.KeyLimit != nil:
		t.KeyLimit, t.KeyLimitSource = *o.KeyLimit, tasklingtype.LimitSourceOverride
	case keys.declaredLimit != nil:
		t.KeyLimit, t.KeyLimitSource = *keys.declaredLimit, tasklingtype.LimitSourceDeclared
	default:
		t.KeyLimitSource = tasklingtype.LimitSourceNone
	}
	t.Retired, t.ScheduleRetired = retirementOf(rAt, rBy), retirementOf(sAt, sBy)
	if t.Retired != nil {
		o.Enabled = rEnabled // the override as set; the row says disabled while retired
	}
	t.Overrides = settingsUpdate(o)
	if o.UpdatedAt != nil {
		t.OverridesUpdatedAt = *o.UpdatedAt
	}
	if dLimit != nil {
		t.DeclaredLimit = *dLimit
	}
	if dBy != nil {
		t.DeclaredBy = *dBy
	}
	switch {
	case o.ConcurrencyLimit != nil:
		t.Limit, t.LimitSource = *o.ConcurrencyLimit, tasklingtype.LimitSourceOverride
	case dLimit != nil:
		t.Limit, t.LimitSource = *dLimit, tasklingtype.LimitSourceDeclared
	default:
		t.LimitSource = tasklingtype.LimitSourceNone
	}
	declared := decl.settings()
	t.Enabled, t.EnabledSource = true, tasklingtype.LimitSourceNone
	switch {
	case t.Retired != nil:
		t.Enabled, t.EnabledSource = false, tasklingtype.LimitSourceOverride // retiring disables it in its row
	case o.Enabled != nil:
		t.Enabled, t.EnabledSource = *o.Enabled, tasklingtype.LimitSourceOverride
	case declared != nil:
		t.Enabled, t.EnabledSource = declared.Enabled, tasklingtype.LimitSourceDeclared
	}
	t.SettingsError = settingsError(o, declared, dLimit)
	if otherLimit != nil && otherAt != nil {
		t.Disagreement = &tasklingtype.Disagreement{OtherLimit: *otherLimit, At: *otherAt}
		if otherBy != nil {
			t.Disagreement.OtherHost = *otherBy
		}
	}
	if lastID != nil {
		t.LastExecution = &tasklingtype.ExecutionRef{ID: *lastID, Status: tasklingtype.Status(*lastStatus), StartedAt: *lastAt}
	}
	if err := countSlots(&t, tokenText, ids, alive); err != nil {
		return t, 0, err
	}
	return t, id, nil
}

// countSlots sets the slots in use, in total and retiring from the task's token list and the
// liveness of its holders.
func countSlots(t *tasklingtype.TaskInfo, tokenText string, ids []int64, alive []bool) error {
	list, err := tokens.Parse(tokenText)
	if err != nil {
		return fmt.Errorf("task %s/%s: stored token list: %w", t.Application, t.Task, err)
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
	if t.LimitSource != tasklingtype.LimitSourceNone {
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
	return nil
}

// settingsUpdate is stored overrides as the public type holds them.
func settingsUpdate(o execution.Overrides) tasklingtype.SettingsUpdate {
	u := tasklingtype.SettingsUpdate{
		KeyLimit:                o.KeyLimit,
		ConcurrencyLimit:        o.ConcurrencyLimit,
		Enabled:                 o.Enabled,
		KeepAliveInterval:       o.KeepAliveInterval,
		KeepAliveDeathThreshold: o.KeepAliveDeathThreshold,
		OverrideThreshold:       o.OverrideThreshold,
	}
	if o.DeathMode != nil {
		m := tasklingtype.DeathMode(*o.DeathMode)
		u.DeathMode = &m
	}
	return u
}

// holderSQL reads the executions $1 holding a task's slots, judged on the DB clock.
const holderSQL = `
SELECT e.id, e.host_name, e.started_at, taskling.execution_last_heartbeat(e, x, s.last_heartbeat),
    (extract(epoch FROM clock_timestamp() - taskling.execution_last_heartbeat(e, x, s.last_heartbeat)) * 1000000)::bigint,
    taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress',
    coalesce(e.fence, 0), coalesce(e.items_done, 0), coalesce(e.items_total, 0)
FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE e.id = ANY($1)
ORDER BY e.id`

// taskSlots reads the slots of a task with their holders through q, in token-list order (for an
// unlimited task: one slot per execution that may hold it); none for a task that does not exist.
func taskSlots(ctx context.Context, q querier, taskID int64) ([]tasklingtype.Slot, error) {
	var text, holdersText string
	if err := q.QueryRow(ctx, `SELECT tokens, holders FROM taskling.task_definition WHERE id = $1`, taskID).Scan(&text, &holdersText); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	list, err := tokens.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("stored token list: %w", err)
	}
	held, err := execution.HolderExecutions(holdersText)
	if err != nil {
		return nil, fmt.Errorf("stored holders: %w", err)
	}
	unlimited := list.IsUnlimited()
	ids := list.Grantees()
	if unlimited {
		ids = held
	}
	rows, err := q.Query(ctx, holderSQL, ids)
	if err != nil {
		return nil, err
	}
	holders := map[int64]*tasklingtype.Holder{}
	var order []int64
	for rows.Next() {
		h := &tasklingtype.Holder{Found: true}
		var ageUS int64
		if err := rows.Scan(&h.ExecutionID, &h.Host, &h.StartedAt, &h.LastHeartbeat, &ageUS, &h.Alive,
			&h.Fence, &h.ItemsDone, &h.ItemsTotal); err != nil {
			rows.Close()
			return nil, err
		}
		h.HeartbeatAge = time.Duration(ageUS) * time.Microsecond
		holders[h.ExecutionID] = h
		order = append(order, h.ExecutionID)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []tasklingtype.Slot
	if unlimited {
		for _, id := range order {
			out = append(out, tasklingtype.Slot{TokenID: list.Tokens[0].ID, Status: tasklingtype.SlotStatus(tokens.Unlimited.String()), Holder: holders[id]})
		}
		return out, nil
	}
	for _, tok := range list.Tokens {
		slot := tasklingtype.Slot{TokenID: tok.ID, Status: tasklingtype.SlotStatus(tok.Status.String())}
		if (tok.Status == tokens.Held || tok.Status == tokens.Retiring) && tok.Grantee != 0 {
			if h, ok := holders[tok.Grantee]; ok {
				slot.Holder = h
			} else {
				slot.Holder = &tasklingtype.Holder{ExecutionID: tok.Grantee}
			}
		}
		out = append(out, slot)
	}
	return out, nil
}

// keyColumns are what a task row holds of keys (migration 0022), as task_summary reads them.
type keyColumns struct {
	holders, keyHolders, overrides, declared string
	declaredLimit                            *int
}

// taskKeysSQL reads task $1's keys: by key, its live holders and their cost (key_holders: every
// other holder is key ”, cost 1), its live waiters (the row's queue counts as key ”) and its
// submissions waiting to start. The keyed ones are counted from submission_keyed_waiting_idx
// (their number, not the task's backlog); key ” has the rest of the task's, from the tally
// (queuedSQL), which changes with the submissions in the same transactions.
const taskKeysSQL = `
WITH d AS (SELECT * FROM taskling.task_definition WHERE id = $1),
h AS (
    SELECT k.key, count(*) AS holders, sum(k.cost) AS cost
    FROM d CROSS JOIN LATERAL taskling.key_holders(d.holders, d.key_holders) k
    JOIN taskling.task_execution e ON e.id = k.exec
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id
    WHERE taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress'
    GROUP BY k.key
), w AS (
    SELECT q.key, count(*) AS waiting FROM taskling.live_key_tickets($1) q GROUP BY q.key
    UNION ALL
    SELECT '', count(*) FROM d CROSS JOIN LATERAL taskling.live_tickets(d.queue) q
), kq AS (
    SELECT c.key, count(*) AS queued FROM taskling.submission c
    WHERE c.task_id = $1 AND c.key <> '' AND c.status = taskling.submission_status('waiting')
    GROUP BY c.key
), q AS (
    SELECT key, queued FROM kq
    UNION ALL
    SELECT '', (SELECT coalesce(sum(t.n), 0) FROM taskling.submission_tally t
                WHERE t.task_id = $1 AND t.status = taskling.submission_status('waiting'))
             - (SELECT coalesce(sum(queued), 0) FROM kq)
)
SELECT key, sum(holders)::integer, sum(cost)::integer, sum(waiting)::integer, greatest(sum(queued), 0)::integer
FROM (SELECT key, holders, cost, 0 AS waiting, 0 AS queued FROM h
      UNION ALL SELECT key, 0, 0, waiting, 0 FROM w
      UNION ALL SELECT key, 0, 0, 0, queued FROM q) k
GROUP BY key
HAVING sum(holders) > 0 OR sum(waiting) > 0 OR sum(queued) > 0`

// keyLimitsSQL reads what limits task $1's keys.
const keyLimitsSQL = `SELECT key_limit, key_overrides, declared_key_limit, declared_keys FROM taskling.task_definition WHERE id = $1`

// taskKeys reads through q a task's busiest keys (most cost in use, then most waiters, then most
// submissions queued) and its named keys, each with its limit in force and where it comes from,
// at most max, and how many there are; none for a task that has no keys (only key "", not named
// by an override or a declaration, and no key limit).
func (s *Store) taskKeys(ctx context.Context, q querier, taskID int64, max int) ([]tasklingtype.KeyInfo, int, error) {
	var o execution.Overrides
	var overrides, declared string
	var declaredLimit *int
	if err := q.QueryRow(ctx, keyLimitsSQL, taskID).Scan(&o.KeyLimit, &overrides, &declaredLimit, &declared); err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	var err error
	var decl execution.Settings
	if o.KeyLimits, err = execution.ParseKeyLimits(overrides); err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	if decl.KeyLimits, err = execution.ParseKeyLimits(declared); err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	if declaredLimit != nil {
		decl.KeyLimit = *declaredLimit
	}
	rows, err := q.Query(ctx, taskKeysSQL, taskID)
	if err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	byKey := map[string]*tasklingtype.KeyInfo{}
	for rows.Next() {
		var k tasklingtype.KeyInfo
		if err := rows.Scan(&k.Key, &k.Holders, &k.CostInUse, &k.Waiting, &k.QueuedSubmissions); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
		}
		byKey[k.Key] = &k
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	rates, err := s.keyRates(ctx, q, taskID, byKey, o.KeyLimits, decl.KeyLimits)
	if err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	// A task without keys: its holders, waiters and submissions are the task's own. An empty key
	// named by an override or a declaration is listed, as any named key is.
	if _, onlyEmpty := byKey[""]; len(byKey) == 1 && onlyEmpty && decl.KeyLimit == 0 && o.KeyLimit == nil && !rates.keyed() &&
		len(o.KeyLimits) == 0 && len(decl.KeyLimits) == 0 {
		return nil, 0, nil
	}
	out := make([]tasklingtype.KeyInfo, 0, len(byKey))
	for _, k := range byKey {
		limit, source := execution.KeyLimitOf(k.Key, decl, o)
		k.Limit, k.LimitSource = limit, keySource(limit, source)
		applyKeyRate(k, rates)
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b tasklingtype.KeyInfo) int {
		return cmp.Or(cmp.Compare(b.CostInUse, a.CostInUse), cmp.Compare(b.Waiting, a.Waiting),
			cmp.Compare(b.QueuedSubmissions, a.QueuedSubmissions), cmp.Compare(a.Key, b.Key))
	})
	return out[:min(len(out), max)], len(out), nil
}

// keySource is the public name of a key limit's source.
func keySource(limit int, source string) tasklingtype.KeyLimitSource {
	switch {
	case source == execution.KeySourceOverride:
		return tasklingtype.KeySourceOverride
	case source == execution.KeySourceKeyLimitOverride:
		return tasklingtype.KeySourceKeyLimitOverride
	case source == execution.KeySourceDeclaredKey:
		return tasklingtype.KeySourceDeclaredKey
	case limit > 0:
		return tasklingtype.KeySourceDeclared
	}
	return tasklingtype.KeySourceNone
}

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

// TaskSummary returns one task with its id, or id 0 if it does not exist.
func (s *Store) TaskSummary(ctx context.Context, app, task string) (tasklingtype.TaskInfo, int64, error) {
	rows, err := s.db.Query(ctx, `SELECT * FROM taskling.task_summary WHERE application_name = $1 AND task_name = $2`, app, task)
	if err != nil {
		return tasklingtype.TaskInfo{}, 0, fmt.Errorf("task %s/%s: %w", app, task, err)
	}
	defer rows.Close()
	var t tasklingtype.TaskInfo
	var id int64
	if rows.Next() {
		t, id, err = scanSummary(rows)
	}
	if err == nil {
		err = rows.Err()
	}
	rows.Close()
	if err == nil && id != 0 {
		var rates map[int64]rateState
		rates, err = s.readRateStates(ctx, s.db, []int64{id}, nil)
		applyTaskRates(&t, rates[id])
	}
	if err != nil {
		return tasklingtype.TaskInfo{}, 0, fmt.Errorf("task %s/%s: %w", app, task, err)
	}
	return t, id, nil
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

// TaskSlots returns the slots of a task with their holders, in token-list order (for an
// unlimited task: one slot per execution that may hold it). The token list and the holders are
// read in one snapshot.
func (s *Store) TaskSlots(ctx context.Context, taskID int64) ([]tasklingtype.Slot, error) {
	var out []tasklingtype.Slot
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
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
		held, err := execution.HolderExecutions(holdersText)
		if err != nil {
			return fmt.Errorf("stored holders: %w", err)
		}
		unlimited := list.IsUnlimited()
		ids := list.Grantees()
		if unlimited {
			ids = held
		}
		rows, err := tx.Query(ctx, holderSQL, ids)
		if err != nil {
			return err
		}
		holders := map[int64]*tasklingtype.Holder{}
		var order []int64
		for rows.Next() {
			h := &tasklingtype.Holder{Found: true}
			var ageUS int64
			if err := rows.Scan(&h.ExecutionID, &h.Host, &h.StartedAt, &h.LastHeartbeat, &ageUS, &h.Alive,
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
				out = append(out, tasklingtype.Slot{TokenID: list.Tokens[0].ID, Status: tasklingtype.SlotStatus(tokens.Unlimited.String()), Holder: holders[id]})
			}
			return nil
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
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("slots of task %d: %w", taskID, err)
	}
	return out, nil
}

// keyColumns are what a task row holds of keys (migration 0022), as task_summary reads them.
type keyColumns struct {
	holders, keyHolders, overrides, declared string
	declaredLimit                            *int
}

// taskKeysSQL reads task $1's keys: by key, its live holders and their cost (key_holders: every
// other holder is key ”, cost 1), and its live waiters (the row's queue counts as key ”).
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
    SELECT x.key, sum(x.n) AS waiting
    FROM (SELECT q.key, count(*) AS n FROM taskling.live_key_tickets($1) q GROUP BY q.key
          UNION ALL
          SELECT '', count(*) FROM d CROSS JOIN LATERAL taskling.live_tickets(d.queue) q) x
    GROUP BY x.key HAVING sum(x.n) > 0
)
SELECT coalesce(h.key, w.key), coalesce(h.holders, 0)::integer, coalesce(h.cost, 0)::integer, coalesce(w.waiting, 0)::integer
FROM h FULL JOIN w ON w.key = h.key`

// keyLimitsSQL reads what limits task $1's keys.
const keyLimitsSQL = `SELECT key_limit, key_overrides, declared_key_limit, declared_keys FROM taskling.task_definition WHERE id = $1`

// TaskKeys returns a task's busiest keys (most cost in use, then most waiters) and its named
// keys, each with its limit in force and where it comes from, at most max, and how many there are;
// none for a task that has no keys (only key "", not named by an override or a declaration, and
// no key limit).
func (s *Store) TaskKeys(ctx context.Context, taskID int64, max int) ([]tasklingtype.KeyInfo, int, error) {
	var o execution.Overrides
	var overrides, declared string
	var declaredLimit *int
	if err := s.db.QueryRow(ctx, keyLimitsSQL, taskID).Scan(&o.KeyLimit, &overrides, &declaredLimit, &declared); err != nil {
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
	rows, err := s.db.Query(ctx, taskKeysSQL, taskID)
	if err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	byKey := map[string]*tasklingtype.KeyInfo{}
	for rows.Next() {
		var k tasklingtype.KeyInfo
		if err := rows.Scan(&k.Key, &k.Holders, &k.CostInUse, &k.Waiting); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
		}
		byKey[k.Key] = &k
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	rates, err := s.keyRates(ctx, taskID, byKey, o.KeyLimits, decl.KeyLimits)
	if err != nil {
		return nil, 0, fmt.Errorf("keys of task %d: %w", taskID, err)
	}
	// A task without keys: its holders and waiters are the task's own. An empty key named by
	// an override or a declaration is listed, as any named key is.
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
		return cmp.Or(cmp.Compare(b.CostInUse, a.CostInUse), cmp.Compare(b.Waiting, a.Waiting), cmp.Compare(a.Key, b.Key))
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

package adminstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype/zeronull"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/tasklingtype"
)

// Operator changes: every change an operator makes to a task is written to
// taskling.operator_change — who, when, the field, its old and new value as text — in the
// transaction that makes the change, so that the trail and the task never disagree.

// Fields of operator changes (Change.Field): the overrides by their API names, retirement, and
// "block #ID" and "submission #ID" for a forced block or a cancelled submission.
const (
	FieldConcurrencyLimit        = "concurrency_limit"
	FieldEnabled                 = "enabled"
	FieldDeathMode               = "death_mode"
	FieldKeepAliveInterval       = "keep_alive_interval"
	FieldKeepAliveDeathThreshold = "keep_alive_death_threshold"
	FieldOverrideThreshold       = "override_threshold"
	FieldKeyLimit                = "key_limit"
	FieldKeepCompleted           = "keep_completed"
	FieldKeepFailed              = "keep_failed"
	FieldKeepBlocked             = "keep_blocked"
	FieldRetired                 = "retired"
	FieldScheduleRetired         = "schedule_retired"
)

// ErrTaskRetired: the task is retired. Its starts are refused; so is a change of its enabled
// override (unretire it first).
var ErrTaskRetired = errors.New("taskling: task is retired")

// insertChangesSQL records changes of task $1 by $2 (principal $3), given as parallel arrays, in
// their order.
const insertChangesSQL = `
INSERT INTO taskling.operator_change (task_id, changed_by, principal, field, old_value, new_value)
SELECT $1, $2, $3, c.f, c.o, c.n
FROM unnest($4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS c(f, o, n, i)
ORDER BY c.i`

// changeList collects the fields whose value changes.
type changeList struct {
	fields     []string
	olds, news []*string
}

func (c *changeList) add(field string, old, new *string) {
	if old == nil && new == nil || old != nil && new != nil && *old == *new {
		return
	}
	c.fields, c.olds, c.news = append(c.fields, field), append(c.olds, old), append(c.news, new)
}

func (c *changeList) queue(b *pgx.Batch, taskID int64, op execution.Operator) {
	if len(c.fields) > 0 {
		b.Queue(insertChangesSQL, taskID, op.By, op.Principal, c.fields, c.olds, c.news)
	}
}

// Values as operators read them; nil stays nil (not overridden).

func textOf[T any](p *T, format func(T) string) *string {
	if p == nil {
		return nil
	}
	s := format(*p)
	return &s
}

// LimitText writes a concurrency limit: "unlimited" for -1.
func LimitText(n int) string {
	if n == -1 {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// ModeText writes a stored death mode.
func ModeText(m int16) string {
	switch m {
	case codes.DeathKeepAlive:
		return "keepalive"
	case codes.DeathOverride:
		return "override"
	}
	return strconv.Itoa(int(m))
}

// KeepText writes a keep setting: "forever", whole days as "14d", whole hours as "36h", else a
// Go duration.
func KeepText(d time.Duration) string {
	switch {
	case d >= KeepForever-time.Microsecond: // intervals are stored in microseconds
		return "forever"
	case d > 0 && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

func durationText(d time.Duration) string { return d.String() }

// OverridesChange is an operator's change of a task's overrides.
type OverridesChange struct {
	Set  execution.Overrides          // nil fields are left as they are
	Keep execution.RetentionOverrides // nil fields are left as they are
	// Clear removes every override (Set and Keep are then ignored).
	Clear bool
	Op    execution.Operator
	// Fallback is what a change of the liveness overrides (death mode, interval, thresholds) is
	// checked against when no host declared settings yet (the caller's own, say); once one did,
	// its declaration. nil: such a change is checked on its own only.
	Fallback *execution.Settings
	// FallbackAs names Fallback in errors.
	FallbackAs string
}

// storedOverrides are a task's overrides as its row and its retention row hold them, the
// enabled one as operators set it: a retired task's row says disabled, and keeps the override
// it had before retiring in retired_enabled.
type storedOverrides struct {
	o       execution.Overrides
	keep    execution.RetentionOverrides
	retired bool
}

func (s storedOverrides) record(c *changeList, next storedOverrides) {
	o, n := s.o, next.o
	c.add(FieldConcurrencyLimit, textOf(o.ConcurrencyLimit, LimitText), textOf(n.ConcurrencyLimit, LimitText))
	c.add(FieldEnabled, textOf(o.Enabled, strconv.FormatBool), textOf(n.Enabled, strconv.FormatBool))
	c.add(FieldDeathMode, textOf(o.DeathMode, ModeText), textOf(n.DeathMode, ModeText))
	c.add(FieldKeepAliveInterval, textOf(o.KeepAliveInterval, durationText), textOf(n.KeepAliveInterval, durationText))
	c.add(FieldKeepAliveDeathThreshold, textOf(o.KeepAliveDeathThreshold, durationText), textOf(n.KeepAliveDeathThreshold, durationText))
	c.add(FieldOverrideThreshold, textOf(o.OverrideThreshold, durationText), textOf(n.OverrideThreshold, durationText))
	c.add(FieldKeyLimit, textOf(o.KeyLimit, strconv.Itoa), textOf(n.KeyLimit, strconv.Itoa))
	for _, key := range slices.Sorted(maps.Keys(o.KeyLimits)) {
		if _, kept := n.KeyLimits[key]; !kept {
			c.add(KeyField(key), textOf(ptr(o.KeyLimits[key]), strconv.Itoa), nil)
		}
	}
	recordRates(c, o, n)
	k, nk := s.keep, next.keep
	c.add(FieldKeepCompleted, textOf(k.Completed, KeepText), textOf(nk.Completed, KeepText))
	c.add(FieldKeepFailed, textOf(k.Failed, KeepText), textOf(nk.Failed, KeepText))
	c.add(FieldKeepBlocked, textOf(k.Blocked, KeepText), textOf(nk.Blocked, KeepText))
}

// apply returns s changed by c.
func (s storedOverrides) apply(c OverridesChange) storedOverrides {
	if c.Clear {
		return storedOverrides{retired: s.retired}
	}
	next := s
	next.o.KeyLimits = s.o.KeyLimits // named keys are changed one by one (ChangeKeyOverride)
	pick := func(dst **time.Duration, v *time.Duration) {
		if v != nil {
			*dst = v
		}
	}
	if v := c.Set.ConcurrencyLimit; v != nil {
		next.o.ConcurrencyLimit = v
	}
	if v := c.Set.Enabled; v != nil {
		next.o.Enabled = v
	}
	if v := c.Set.DeathMode; v != nil {
		next.o.DeathMode = v
	}
	if v := c.Set.KeyLimit; v != nil {
		next.o.KeyLimit = v
	}
	if v := c.Set.Rate; v != nil {
		next.o.Rate = v
	}
	if v := c.Set.KeyRate; v != nil {
		next.o.KeyRate = v
	}
	pick(&next.o.KeepAliveInterval, c.Set.KeepAliveInterval)
	pick(&next.o.KeepAliveDeathThreshold, c.Set.KeepAliveDeathThreshold)
	pick(&next.o.OverrideThreshold, c.Set.OverrideThreshold)
	pick(&next.keep.Completed, c.Keep.Completed)
	pick(&next.keep.Failed, c.Keep.Failed)
	pick(&next.keep.Blocked, c.Keep.Blocked)
	return next
}

// lockOverridesSQL reads a task's overrides under its row's lock; its key overrides through the
// row's JSON, so that it reads a schema before 0022 (no keys) too: they are then none, and
// has_keys is false.
const lockOverridesSQL = `
SELECT d.concurrency_limit, CASE WHEN d.retired_at IS NULL THEN d.enabled ELSE d.retired_enabled END, d.death_mode,
    d.keep_alive_interval, d.keep_alive_death_threshold, d.override_threshold, d.retired_at IS NOT NULL,
    (to_jsonb(d) ->> 'key_limit')::integer, coalesce(to_jsonb(d) ->> 'key_overrides', ''), to_jsonb(d) ? 'key_overrides'
FROM taskling.task_definition d WHERE d.id = $1 FOR UPDATE`

// p5WriteOverridesSQL is writeOverridesSQL on a schema before 0022 (no keys).
const p5WriteOverridesSQL = `
WITH u AS (
    UPDATE taskling.task_definition SET
        concurrency_limit = $2,
        enabled = CASE WHEN retired_at IS NULL THEN $3 ELSE false END,
        retired_enabled = CASE WHEN retired_at IS NULL THEN NULL ELSE $3 END,
        death_mode = $4, keep_alive_interval = $5, keep_alive_death_threshold = $6, override_threshold = $7,
        overrides_updated_at = clock_timestamp()
    WHERE id = $1
    RETURNING id
)
SELECT pg_notify('taskling_slots', id::text) FROM u`

// writeOverridesSQL writes a task's overrides ($3: the enabled one as set; a retired task's
// row stays disabled and keeps it for its unretiring) and wakes its waiters, since a raised limit
// or an enabled task may let them in.
const writeOverridesSQL = `
WITH u AS (
    UPDATE taskling.task_definition SET
        concurrency_limit = $2,
        enabled = CASE WHEN retired_at IS NULL THEN $3 ELSE false END,
        retired_enabled = CASE WHEN retired_at IS NULL THEN NULL ELSE $3 END,
        death_mode = $4, keep_alive_interval = $5, keep_alive_death_threshold = $6, override_threshold = $7,
        key_limit = $8, key_overrides = $9, overrides_updated_at = clock_timestamp()
    WHERE id = $1
    RETURNING id
)
SELECT pg_notify('taskling_slots', id::text) FROM u`

// ChangeOverrides makes an operator's change of a task's overrides and records each field whose
// value it changes, in one transaction: the old values are read under the task row's lock (and,
// first, the retention row's, so that the task row is never held while a cleanup batch holds
// that one). The next acquisition on every host obeys the new overrides. A change of a retired
// task's enabled override is refused with ErrTaskRetired, and a refused change writes nothing.
// It returns how many fields changed.
func (s *Store) ChangeOverrides(ctx context.Context, taskID int64, c OverridesChange) (int, error) {
	if !c.Clear {
		if err := c.Set.ValidateFields(); err != nil {
			return 0, err
		}
		if err := c.Keep.ValidateFields(); err != nil {
			return 0, err
		}
	}
	keepToo := c.Clear || !c.Keep.IsZero()
	writeTask := c.Clear || !c.Set.IsZero() || c.Keep.IsZero() // an empty change still wakes waiters
	rates, err := s.hasRates(ctx)
	switch {
	case err != nil:
		return 0, fmt.Errorf("change the overrides of task %d: %w", taskID, err)
	case !rates && !c.Clear && c.Set.Rated():
		return 0, errNoRates
	}
	rates = rates && (c.Clear || c.Set.Rated())
	var changes changeList
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var old storedOverrides
		b := &pgx.Batch{}
		if keepToo {
			b.Queue(`INSERT INTO taskling.retention (task_id) VALUES ($1) ON CONFLICT (task_id) DO NOTHING`, taskID)
			b.Queue(`SELECT override_completed, override_failed, override_blocked FROM taskling.retention WHERE task_id = $1 FOR UPDATE`, taskID).
				QueryRow(func(row pgx.Row) error { return row.Scan(&old.keep.Completed, &old.keep.Failed, &old.keep.Blocked) })
		}
		var hasKeys bool
		b.Queue(lockOverridesSQL, taskID).QueryRow(func(row pgx.Row) error {
			o := &old.o
			var keys string
			if err := row.Scan(&o.ConcurrencyLimit, &o.Enabled, &o.DeathMode, &o.KeepAliveInterval, &o.KeepAliveDeathThreshold,
				&o.OverrideThreshold, &old.retired, &o.KeyLimit, &keys, &hasKeys); err != nil {
				return err
			}
			var err error
			o.KeyLimits, err = execution.ParseKeyLimits(keys)
			return err
		})
		if rates {
			queueRateOverridesRead(b, taskID, &old.o)
		}
		check := !c.Clear && c.Set.Liveness()
		var declared execution.Settings
		var declaredAs string
		var found bool
		if check {
			b.Queue(declarationSQL, taskID).QueryRow(func(row pgx.Row) (err error) {
				declared, declaredAs, found, err = declaredOf(row)
				return err
			})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if old.retired && c.Set.Enabled != nil && !c.Clear {
			return fmt.Errorf("%w: unretire it before enabling or disabling it", ErrTaskRetired)
		}
		next := old.apply(c)
		if !found && c.Fallback != nil {
			declared, declaredAs, found = *c.Fallback, c.FallbackAs, true
		}
		if check && found {
			// Overrides that no start would accept are refused, not stored.
			if err := next.o.Check(declared, declaredAs); err != nil {
				return err
			}
		}
		old.record(&changes, next)
		b = &pgx.Batch{}
		switch o := next.o; {
		case !writeTask:
		case hasKeys:
			b.Queue(writeOverridesSQL, taskID, o.ConcurrencyLimit, o.Enabled, o.DeathMode, o.KeepAliveInterval,
				o.KeepAliveDeathThreshold, o.OverrideThreshold, o.KeyLimit, execution.FormatKeyLimits(o.KeyLimits))
		case o.KeyLimit != nil || len(o.KeyLimits) > 0:
			return fmt.Errorf("%w: key limits need migration 0022: run migrations.Up", execution.ErrInvalidSettings)
		default:
			b.Queue(p5WriteOverridesSQL, taskID, o.ConcurrencyLimit, o.Enabled, o.DeathMode, o.KeepAliveInterval,
				o.KeepAliveDeathThreshold, o.OverrideThreshold)
		}
		if rates && ratesChanged(old.o, next.o) {
			queueRateOverridesWrite(b, taskID, next.o) // overrides_updated_at is bumped by the task's write
		}
		if keepToo {
			b.Queue(`UPDATE taskling.retention SET override_completed = $2, override_failed = $3, override_blocked = $4 WHERE task_id = $1`,
				taskID, next.keep.Completed, next.keep.Failed, next.keep.Blocked)
		}
		changes.queue(b, taskID, c.Op)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("change the overrides of task %d: %w", taskID, err)
	}
	return len(changes.fields), nil
}

// retireTaskSQL retires task $1 by principal $3 (note $2) unless it is retired: its enabled
// override becomes false (kept in retired_enabled), so every host refuses its starts, and its
// waiters are woken to learn it.
const retireTaskSQL = `
WITH u AS (
    UPDATE taskling.task_definition SET retired_at = now(), retired_by = $3, retired_enabled = enabled, enabled = false
    WHERE id = $1 AND retired_at IS NULL
    RETURNING id
), c AS (
    INSERT INTO taskling.operator_change (task_id, changed_by, principal, field, old_value, new_value)
    SELECT id, $2, $3, 'retired', 'no', 'yes' FROM u
)
SELECT pg_notify('taskling_slots', id::text) IS NULL FROM u`

// retireScheduleSQL retires the schedule of task $1 by principal $3 (note $2) unless it is
// retired; it answers whether the task has a schedule and whether it changed.
const retireScheduleSQL = `
WITH u AS (
    UPDATE taskling.schedule SET retired_at = now(), retired_by = $3
    WHERE task_id = $1 AND retired_at IS NULL
    RETURNING task_id
), c AS (
    INSERT INTO taskling.operator_change (task_id, changed_by, principal, field, old_value, new_value)
    SELECT task_id, $2, $3, 'schedule_retired', 'no', 'yes' FROM u
)
SELECT EXISTS (SELECT 1 FROM taskling.schedule WHERE task_id = $1), EXISTS (SELECT 1 FROM u)`

// RetireTask retires a task, recording the change: every host refuses its starts from the next
// one on, it leaves the lists, its schedule claims nothing. changed is false when it was retired
// already (nothing is written).
func (s *Store) RetireTask(ctx context.Context, taskID int64, op execution.Operator) (changed bool, err error) {
	rows, err := s.db.Query(ctx, retireTaskSQL, taskID, op.By, op.Principal)
	if err != nil {
		return false, fmt.Errorf("retire task %d: %w", taskID, err)
	}
	n, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return false, fmt.Errorf("retire task %d: %w", taskID, err)
	}
	return len(n) > 0, nil
}

// RetireSchedule retires a task's schedule, recording the change: no host claims its instants
// while it is retired. found is false when the task has no schedule.
func (s *Store) RetireSchedule(ctx context.Context, taskID int64, op execution.Operator) (changed, found bool, err error) {
	if err := s.db.QueryRow(ctx, retireScheduleSQL, taskID, op.By, op.Principal).Scan(&found, &changed); err != nil {
		return false, false, fmt.Errorf("retire the schedule of task %d: %w", taskID, err)
	}
	return changed, found, nil
}

// UnretireRequest ends the retirement of a task, or of its schedule.
type UnretireRequest struct {
	TaskID   int64
	Schedule bool // the schedule's retirement, not the task's
	Op       execution.Operator
	// Gap, when set, moves the task's schedule cursor from Gap.Expected to Next, recording
	// Gap.Events (the instants that came due while it was retired: decided, not run), by a
	// compare-and-set: if the cursor moved meanwhile, nothing is written and the error is a
	// schedule conflict (execution.IsScheduleConflict).
	Gap  *execution.ScheduleClaim
	Next time.Time
	Host string // recorded with the gap's events
}

// gapSQL moves task $1's schedule cursor from $9 to $8 over a retirement's gap, whatever the
// schedule's retirement, recording the events ($3–$7, by host $2); a failed compare-and-set
// raises TLC01, aborting the transaction.
const gapSQL = `
WITH u AS (
    UPDATE taskling.schedule SET cursor_at = $8 WHERE task_id = $1 AND cursor_at = $9
    RETURNING task_id
), ev AS (
    INSERT INTO taskling.schedule_event (task_id, kind, first_instant, last_instant, instants, detail, host_name)
    SELECT $1, e.k, e.f, e.l, e.n, e.d, $2
    FROM u, unnest($3::smallint[], $4::timestamptz[], $5::timestamptz[], $6::bigint[], $7::text[]) WITH ORDINALITY AS e(k, f, l, n, d, o)
    ORDER BY e.o
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN true ELSE taskling.schedule_cursor_moved($1) END`

// unretireTaskSQL and unretireScheduleSQL end the retirement of task $1, or of its schedule.
const (
	unretireTaskSQL = `
UPDATE taskling.task_definition SET enabled = retired_enabled, retired_at = NULL, retired_by = NULL, retired_enabled = NULL
WHERE id = $1 AND retired_at IS NOT NULL
RETURNING id`
	unretireScheduleSQL = `
UPDATE taskling.schedule SET retired_at = NULL, retired_by = NULL
WHERE task_id = $1 AND retired_at IS NOT NULL
RETURNING task_id`
)

// Unretire ends a retirement, recording the change, and wakes the task's waiters and schedulers.
// changed is false when it was not retired (nothing is written).
func (s *Store) Unretire(ctx context.Context, req UnretireRequest) (changed bool, err error) {
	clear, field := unretireTaskSQL, FieldRetired
	if req.Schedule {
		clear, field = unretireScheduleSQL, FieldScheduleRetired
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, clear, req.TaskID)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		changed = true
		b := &pgx.Batch{}
		if g := req.Gap; g != nil {
			a := execution.ToArrays(g.Events)
			b.Queue(gapSQL, req.TaskID, req.Host, a.Kinds, a.Firsts, a.Lasts, a.Counts, a.Details, req.Next, g.Expected)
		}
		was, now := "yes", "no"
		changes := changeList{fields: []string{field}, olds: []*string{&was}, news: []*string{&now}}
		changes.queue(b, req.TaskID, req.Op)
		b.Queue(`SELECT pg_notify('taskling_slots', $1::text)`, strconv.FormatInt(req.TaskID, 10))
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		changed = false
		if execution.IsScheduleConflict(err) {
			return false, err
		}
		return false, fmt.Errorf("unretire task %d: %w", req.TaskID, err)
	}
	return changed, nil
}

// Retired returns a task's retirement, nil when it is not retired.
func (s *Store) Retired(ctx context.Context, taskID int64) (*tasklingtype.Retirement, error) {
	var at *time.Time
	var by *string
	err := s.db.QueryRow(ctx, `SELECT retired_at, retired_by FROM taskling.task_definition WHERE id = $1`, taskID).Scan(&at, &by)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("retirement of task %d: %w", taskID, err)
	}
	return retirementOf(at, by), nil
}

// retirementOf is the retirement a row's retired_at and retired_by columns say (nil: none).
func retirementOf(at *time.Time, by *string) *tasklingtype.Retirement {
	if at == nil {
		return nil
	}
	r := &tasklingtype.Retirement{At: *at}
	if by != nil {
		r.By = *by
	}
	return r
}

// Changes returns a task's operator changes, newest first: at most limit, those before the
// change with id before (0: from the newest). Old and New are nil for "not overridden"; the
// principal is NULL, read as "", on the rows written before migration 0016 (or by older binaries).
func (s *Store) Changes(ctx context.Context, taskID, before int64, limit int) ([]tasklingtype.Change, error) {
	rows, err := s.db.Query(ctx, `
SELECT id, at, changed_by, principal, field, old_value, new_value FROM taskling.operator_change
WHERE task_id = $1 AND ($2 = 0 OR id < $2)
ORDER BY id DESC LIMIT $3`, taskID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("changes of task %d: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tasklingtype.Change, error) {
		var c tasklingtype.Change
		err := row.Scan(&c.ID, &c.At, &c.By, (*zeronull.Text)(&c.Principal), &c.Field, &c.Old, &c.New)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("changes of task %d: %w", taskID, err)
	}
	return out, nil
}

// KeyField is the field of a change of key's override: key_limit[acme].
func KeyField(key string) string { return FieldKeyLimit + "[" + key + "]" }

func ptr[T any](v T) *T { return &v }

// ChangeKeyOverride sets the operator's override of a named key's limit (limit nil: removes it),
// recording the change, and wakes the task's waiters (a raised limit admits them at once). It
// reports whether anything changed.
func (s *Store) ChangeKeyOverride(ctx context.Context, taskID int64, key string, limit *int, op execution.Operator) (bool, error) {
	return s.ChangeKeyOverrides(ctx, taskID, KeyOverrideChange{Key: key, Limit: limit, ClearLimit: limit == nil, Op: op})
}

// KeyOverrideChange is an operator's change of a named key's overrides.
type KeyOverrideChange struct {
	Key   string
	Limit *int            // the key's limit; nil: left as it is
	Rate  *execution.Rate // the key's rate (zero: none); nil: left as it is
	// ClearLimit and ClearRate remove the key's override of its limit, of its rate.
	ClearLimit, ClearRate bool
	Op                    execution.Operator
}

// ChangeKeyOverrides changes the operator's overrides of a named key's limit and rate, recording
// each change (key_limit[KEY], key_rate[KEY]), and wakes the task's waiters; the task row's
// overrides_updated_at moves with any change. It reports whether anything changed.
func (s *Store) ChangeKeyOverrides(ctx context.Context, taskID int64, c KeyOverrideChange) (bool, error) {
	rates, err := s.hasRates(ctx)
	if err != nil {
		return false, fmt.Errorf("change the overrides of key %q of task %d: %w", c.Key, taskID, err)
	}
	if !rates && c.Rate != nil {
		return false, errNoRates
	}
	rates = rates && (c.Rate != nil || c.ClearRate)
	var changes changeList
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var old storedOverrides
		o := &old.o
		var keys string
		var hasKeys bool
		b := &pgx.Batch{}
		b.Queue(lockOverridesSQL, taskID).QueryRow(func(row pgx.Row) error {
			return row.Scan(&o.ConcurrencyLimit, &o.Enabled, &o.DeathMode, &o.KeepAliveInterval,
				&o.KeepAliveDeathThreshold, &o.OverrideThreshold, &old.retired, &o.KeyLimit, &keys, &hasKeys)
		})
		if rates {
			queueRateOverridesRead(b, taskID, o)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if !hasKeys {
			return fmt.Errorf("%w: key limits need migration 0022: run migrations.Up", execution.ErrInvalidSettings)
		}
		var err error
		if o.KeyLimits, err = execution.ParseKeyLimits(keys); err != nil {
			return err
		}
		limits := changeKey(o.KeyLimits, c.Key, c.Limit, c.ClearLimit)
		keyRates := changeKey(o.KeyRates, c.Key, c.Rate, c.ClearRate)
		if len(limits) > execution.MaxNamedKeys || len(keyRates) > execution.MaxNamedKeys {
			return fmt.Errorf("%w: a task's operator may override at most %d named keys", execution.ErrInvalidSettings, execution.MaxNamedKeys)
		}
		changes.add(KeyField(c.Key), textOf(lookup(o.KeyLimits, c.Key), strconv.Itoa), textOf(lookup(limits, c.Key), strconv.Itoa))
		changes.add(KeyRateField(c.Key), textOf(lookup(o.KeyRates, c.Key), RateText), textOf(lookup(keyRates, c.Key), RateText))
		if len(changes.fields) == 0 {
			return nil
		}
		b = &pgx.Batch{}
		b.Queue(writeKeyOverridesSQL, taskID, execution.FormatKeyLimits(limits)) // bumps overrides_updated_at
		if rates && !maps.Equal(o.KeyRates, keyRates) {
			next := *o
			next.KeyRates = keyRates
			queueRateOverridesWrite(b, taskID, next)
		}
		changes.queue(b, taskID, c.Op)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return false, fmt.Errorf("change the overrides of key %q of task %d: %w", c.Key, taskID, err)
	}
	return len(changes.fields) > 0, nil
}

// changeKey returns m with key set to v (nil: left as it is), or removed when clear.
func changeKey[T any](m map[string]T, key string, v *T, clear bool) map[string]T {
	next := maps.Clone(m)
	if next == nil {
		next = map[string]T{}
	}
	switch {
	case clear:
		delete(next, key)
	case v != nil:
		next[key] = *v
	}
	return next
}

// lookup is m[key], nil when absent.
func lookup[T any](m map[string]T, key string) *T {
	if v, ok := m[key]; ok {
		return &v
	}
	return nil
}

// writeKeyOverridesSQL writes a task's overrides of named keys and wakes its waiters.
const writeKeyOverridesSQL = `
WITH u AS (
    UPDATE taskling.task_definition SET key_overrides = $2, overrides_updated_at = clock_timestamp()
    WHERE id = $1
    RETURNING id
)
SELECT pg_notify('taskling_slots', id::text) FROM u`

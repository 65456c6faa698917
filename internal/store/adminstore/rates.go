package adminstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/tasklingtype"
)

// Rates (migration 0023, docs/rates.md): the operator's overrides of a task's rates live in its
// taskling.task_rate row (rate, key_rate: NULL not overridden, '' overridden to none; key_rates:
// named keys'), beside what its last requester declared and the state the token transactions
// keep (tat_us). Every change of them is made under the task row's lock, like every other
// override, and bumps the row's overrides_updated_at in the same transaction, so that the grant
// path's cached rows of the task are read again.

// Fields of rate changes (Change.Field); a named key's is KeyRateField(key).
const (
	FieldRate    = "rate"
	FieldKeyRate = "key_rate"
)

// KeyRateField is the field of a change of key's rate override: key_rate[acme].
func KeyRateField(key string) string { return FieldKeyRate + "[" + key + "]" }

// RateText writes a rate as operators read it: "100/1m", "none" for no rate.
func RateText(r execution.Rate) string {
	if r.IsZero() {
		return "none"
	}
	return r.String()
}

// errNoRates refuses a rate override on a schema before 0023.
var errNoRates = fmt.Errorf("%w: rates need migration 0023: run migrations.Up", execution.ErrInvalidSettings)

// rateSupport says whether the schema has taskling.task_rate (migration 0023), looked up once.
type rateSupport struct{ known, has atomic.Bool }

func (s *Store) hasRates(ctx context.Context) (bool, error) {
	if s.rates.known.Load() {
		return s.rates.has.Load(), nil
	}
	var has bool
	if err := s.db.QueryRow(ctx, `SELECT to_regclass('taskling.task_rate') IS NOT NULL`).Scan(&has); err != nil {
		return false, fmt.Errorf("look for taskling.task_rate: %w", err)
	}
	s.rates.has.Store(has)
	s.rates.known.Store(true)
	return has, nil
}

// rateOverridesSQL reads task $1's rate overrides (no row: none).
const rateOverridesSQL = `
SELECT r.rate, r.key_rate, r.key_rates FROM taskling.task_rate r
WHERE r.stripe = ($1 % 64)::smallint AND r.task_id = $1`

// writeRateOverridesSQL writes task $1's rate overrides, and nothing else of its row.
const writeRateOverridesSQL = `
INSERT INTO taskling.task_rate AS r (stripe, task_id, rate, key_rate, key_rates)
VALUES (($1 % 64)::smallint, $1, $2, $3, $4)
ON CONFLICT (stripe, task_id) DO UPDATE
SET rate = EXCLUDED.rate, key_rate = EXCLUDED.key_rate, key_rates = EXCLUDED.key_rates`

// queueRateOverridesRead queues the read of task's rate overrides into o.
func queueRateOverridesRead(b *pgx.Batch, taskID int64, o *execution.Overrides) {
	b.Queue(rateOverridesSQL, taskID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var rate, keyRate *string
			var keyRates string
			if err := rows.Scan(&rate, &keyRate, &keyRates); err != nil {
				return err
			}
			var err error
			if o.Rate, err = decodeOverride(rate); err != nil {
				return err
			}
			if o.KeyRate, err = decodeOverride(keyRate); err != nil {
				return err
			}
			if o.KeyRates, err = execution.ParseKeyRates(keyRates); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// decodeOverride reads a rate override column (NULL: not overridden).
func decodeOverride(s *string) (*execution.Rate, error) {
	if s == nil {
		return nil, nil
	}
	r, err := execution.DecodeRate(*s)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// encodeOverride writes a rate override column.
func encodeOverride(r *execution.Rate) *string {
	if r == nil {
		return nil
	}
	s := execution.EncodeRate(*r)
	return &s
}

// ratesChanged reports whether the rate overrides of next differ from those of old.
func ratesChanged(old, next execution.Overrides) bool {
	return !samePtr(old.Rate, next.Rate) || !samePtr(old.KeyRate, next.KeyRate) || !maps.Equal(old.KeyRates, next.KeyRates)
}

func samePtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// queueRateOverridesWrite queues the write of o's rate overrides.
func queueRateOverridesWrite(b *pgx.Batch, taskID int64, o execution.Overrides) {
	b.Queue(writeRateOverridesSQL, taskID, encodeOverride(o.Rate), encodeOverride(o.KeyRate), execution.FormatKeyRates(o.KeyRates))
}

// recordRates adds the changes of rate overrides from o to n.
func recordRates(c *changeList, o, n execution.Overrides) {
	c.add(FieldRate, textOf(o.Rate, RateText), textOf(n.Rate, RateText))
	c.add(FieldKeyRate, textOf(o.KeyRate, RateText), textOf(n.KeyRate, RateText))
	for _, key := range slices.Sorted(maps.Keys(o.KeyRates)) {
		if _, kept := n.KeyRates[key]; !kept {
			c.add(KeyRateField(key), textOf(ptr(o.KeyRates[key]), RateText), nil)
		}
	}
}

// rateStatesSQL reads what the read side shows of tasks $1's rates: their task_rate rows, the
// tats of keys $2 and the database clock, in µs since the Unix epoch. A task that never had a
// rate has no row.
const rateStatesSQL = `
SELECT r.task_id, r.rate, r.key_rate, r.key_rates, r.declared_rate, r.declared_key_rate, r.declared_key_rates, r.tat_us,
    coalesce(kr.keys, '{}'), coalesce(kr.tats, '{}'), (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
FROM unnest($1::bigint[]) AS t(id)
JOIN taskling.task_rate r ON r.stripe = (t.id % 64)::smallint AND r.task_id = t.id
LEFT JOIN LATERAL (
    SELECT array_agg(k.key) AS keys, array_agg(k.tat_us) AS tats FROM taskling.key_rate k
    WHERE k.stripe = r.stripe AND k.task_id = r.task_id AND k.key = ANY($2::text[])
) kr ON true`

// rateStatesSQLs are rateStatesSQL for the tasks of one stripe (execution.PartitionsOf): a cached
// generic plan naming the partitioned tables locks their 128 partitions at every read.
var rateStatesSQLs = execution.PartitionsOf(rateStatesSQL)

// querier runs a query: the pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// rateState is what rateStatesSQL read of a task: the overrides, the declaration, the task's
// tat, keys' tats and the database clock then.
type rateState struct {
	o        execution.Overrides
	declared execution.Settings
	tat, now int64
	keyTATs  map[string]int64
}

// readRateStates reads tasks' rate states, with the tats of keys; none on a schema before 0023,
// or for a task that never had a rate.
func (s *Store) readRateStates(ctx context.Context, q querier, ids []int64, keys []string) (map[int64]rateState, error) {
	out := map[int64]rateState{}
	if has, err := s.hasRates(ctx); err != nil || !has || len(ids) == 0 {
		return out, err
	}
	if keys == nil {
		keys = []string{}
	}
	sql := rateStatesSQL
	if stripe := execution.StripeOf(ids[0]); !slices.ContainsFunc(ids, func(id int64) bool { return execution.StripeOf(id) != stripe }) {
		sql = rateStatesSQLs[stripe] // one stripe (a task's view): its partitions, not all 128 locked
	}
	rows, err := q.Query(ctx, sql, ids, keys)
	if err != nil {
		return nil, err
	}
	var bad error
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		st, id, decodeErr, err := scanRateState(row)
		switch {
		case err != nil:
			return struct{}{}, err
		case decodeErr != nil:
			// One task's unreadable rate must not fail a list: the list shows that task without
			// rates, and the task's own view reports the error.
			bad = fmt.Errorf("task %d: %w", id, decodeErr)
		default:
			out[id] = st
		}
		return struct{}{}, nil
	})
	if err == nil && len(ids) == 1 {
		err = bad
	}
	return out, err
}

// scanRateState scans a row of rateStatesSQL: err is the scan's, decodeErr that of a stored value
// that does not read.
func scanRateState(row pgx.Row) (st rateState, id int64, decodeErr, err error) {
	st.keyTATs = map[string]int64{}
	var rate, keyRate *string
	var keyRates, dRate, dKeyRate, dKeyRates string
	var names []string
	var tats []int64
	if err := row.Scan(&id, &rate, &keyRate, &keyRates, &dRate, &dKeyRate, &dKeyRates, &st.tat, &names, &tats, &st.now); err != nil {
		return st, id, nil, err
	}
	for i, k := range names {
		st.keyTATs[k] = tats[i]
	}
	var errs [6]error
	st.o.Rate, errs[0] = decodeOverride(rate)
	st.o.KeyRate, errs[1] = decodeOverride(keyRate)
	st.o.KeyRates, errs[2] = execution.ParseKeyRates(keyRates)
	st.declared.Rate, errs[3] = execution.DecodeRate(dRate)
	st.declared.KeyRate, errs[4] = execution.DecodeRate(dKeyRate)
	st.declared.KeyRates, errs[5] = execution.ParseKeyRates(dKeyRates)
	return st, id, errors.Join(errs[:]...), nil
}

// applyTaskRates sets the task's rates in force, their sources and NextAllowed from st.
func applyTaskRates(t *tasklingtype.TaskInfo, st rateState) {
	t.Overrides.Rate, t.Overrides.KeyRate = publicRate(st.o.Rate), publicRate(st.o.KeyRate)
	pick := func(o *execution.Rate, declared execution.Rate) (tasklingtype.Rate, tasklingtype.LimitSource) {
		switch {
		case o != nil:
			return shown(*o), tasklingtype.LimitSourceOverride
		case !declared.IsZero():
			return shown(declared), tasklingtype.LimitSourceDeclared
		}
		return tasklingtype.Rate{}, tasklingtype.LimitSourceNone
	}
	t.Rate, t.RateSource = pick(st.o.Rate, st.declared.Rate)
	t.KeyRate, t.KeyRateSource = pick(st.o.KeyRate, st.declared.KeyRate)
	t.NextAllowed = execution.NextAllowed(execution.Rate(t.Rate), st.tat, st.now) // a burst of 0 counts as 1
}

// publicRate is a stored override as the public type holds it.
func publicRate(r *execution.Rate) *tasklingtype.Rate {
	if r == nil {
		return nil
	}
	v := shown(*r)
	return &v
}

// shown is a stored rate as the read side shows it: a burst of 1 as 0 (its default), as ParseRate
// reads "100/1m" and as a requester's settings most often hold it.
func shown(r execution.Rate) tasklingtype.Rate {
	if r.Burst == 1 {
		r.Burst = 0
	}
	return tasklingtype.Rate(r)
}

// applyKeyRate sets key k's rate in force, its source and NextAllowed from st.
func applyKeyRate(k *tasklingtype.KeyInfo, st rateState) {
	r, source := execution.RateOf(k.Key, st.declared, st.o)
	present := 0
	if !r.IsZero() {
		present = 1
	}
	k.Rate, k.RateSource = shown(r), keySource(present, source)
	if tat, ok := st.keyTATs[k.Key]; ok {
		k.NextAllowed = execution.NextAllowed(r, tat, st.now)
	}
}

// keyed reports whether st puts keys under a rate (a key rate or a named key's, declared or
// overridden).
func (st rateState) keyed() bool {
	o, d := st.o, st.declared
	return o.KeyRate != nil && !o.KeyRate.IsZero() || len(o.KeyRates) > 0 ||
		o.KeyRate == nil && !d.KeyRate.IsZero() || len(d.KeyRates) > 0
}

// keyRates adds to byKey the keys named by limits or by rates, and returns the task's rate state
// with the tats of every key in byKey.
func (s *Store) keyRates(ctx context.Context, q querier, taskID int64, byKey map[string]*tasklingtype.KeyInfo, limits ...map[string]int) (rateState, error) {
	add := func(k string) {
		if byKey[k] == nil {
			byKey[k] = &tasklingtype.KeyInfo{Key: k}
		}
	}
	for _, named := range limits {
		for k := range named {
			add(k)
		}
	}
	states, err := s.readRateStates(ctx, q, []int64{taskID}, nil)
	st, ok := states[taskID]
	if err != nil || !ok {
		return st, err
	}
	for _, named := range []map[string]execution.Rate{st.o.KeyRates, st.declared.KeyRates} {
		for k := range named {
			add(k)
		}
	}
	if !st.keyed() {
		return st, nil
	}
	states, err = s.readRateStates(ctx, q, []int64{taskID}, slices.Collect(maps.Keys(byKey)))
	return states[taskID], err
}

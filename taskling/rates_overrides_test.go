package taskling_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/taskling"
)

// changesOf lists a task's changes as field:old>new, newest first.
func changesOf(t *testing.T, b *testBundle) []string {
	t.Helper()
	page, err := b.client.TaskChanges(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	var got []string
	for _, c := range page.Changes {
		text := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		got = append(got, c.Field+":"+text(c.Old)+">"+text(c.New))
	}
	return got
}

// rateRow reads task_rate's override columns of the bundle's task, checking its stripe.
func rateRow(t *testing.T, b *testBundle) (rate, keyRate *string, keyRates string) {
	t.Helper()
	err := b.pool.QueryRow(b.ctx, `
SELECT r.rate, r.key_rate, r.key_rates FROM taskling.task_rate r JOIN taskling.task_definition d ON d.id = r.task_id
WHERE d.application_name = $1 AND d.task_name = $2 AND r.stripe = d.id % 64`, b.app, b.task).Scan(&rate, &keyRate, &keyRates)
	require.NoError(t, err)
	return rate, keyRate, keyRates
}

func overridesUpdatedAt(t *testing.T, b *testBundle) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT overrides_updated_at FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2`,
		b.app, b.task).Scan(&at))
	return at
}

// TestRateOverridesAreStoredShownRecordedAndCleared: the operator's overrides of Rate, KeyRate and
// a named key's rate are written to task_rate's override columns (a zero Rate as none), move the
// task row's overrides_updated_at in the same transaction, are shown with their sources, recorded
// in the audit trail as rate, key_rate and key_rate[KEY], and cleared with the other overrides.
func TestRateOverridesAreStoredShownRecordedAndCleared(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(4))
	ops := b.client.As(taskling.Operator{Name: "alice"})
	thirty := taskling.Rate{Count: 30, Per: time.Minute}
	ten := taskling.Rate{Count: 10, Per: time.Minute, Burst: 2}
	require.NoError(t, ops.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Rate: &thirty, KeyRate: &ten}))
	rate, keyRate, keyRates := rateRow(t, b)
	require.Equal(t, "30/60000000/1", *rate)
	require.Equal(t, "10/60000000/2", *keyRate)
	require.Empty(t, keyRates)

	before := overridesUpdatedAt(t, b)
	five := taskling.Rate{Count: 5, Per: time.Minute}
	require.NoError(t, ops.UpdateKeySettings(b.ctx, b.app, b.task, "acme", taskling.KeySettingsUpdate{Rate: &five}))
	require.True(t, overridesUpdatedAt(t, b).After(before), "a key's rate override moves the task row")
	_, _, keyRates = rateRow(t, b)
	require.Equal(t, "K:61636d65,R:5/60000000/1", keyRates)

	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, thirty, info.Rate)
	require.Equal(t, taskling.LimitSourceOverride, info.RateSource)
	require.Equal(t, ten, info.KeyRate)
	require.Equal(t, taskling.LimitSourceOverride, info.KeyRateSource)
	require.Equal(t, &thirty, info.Overrides.Rate)
	require.Zero(t, info.NextAllowed, "no start yet")
	require.Len(t, info.Keys, 1)
	require.Equal(t, taskling.KeyInfo{Key: "acme", Rate: five, RateSource: taskling.KeySourceOverride, LimitSource: taskling.KeySourceNone}, info.Keys[0])

	before = overridesUpdatedAt(t, b)
	require.NoError(t, ops.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Rate: &taskling.Rate{}}))
	require.True(t, overridesUpdatedAt(t, b).After(before), "a rate override moves the task row")
	rate, _, _ = rateRow(t, b)
	require.Equal(t, "", *rate, "overridden to none")
	info, err = b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.True(t, info.Rate.IsZero())
	require.Equal(t, taskling.LimitSourceOverride, info.RateSource)

	require.NoError(t, ops.ClearOverrides(b.ctx, b.app, b.task))
	rate, keyRate, keyRates = rateRow(t, b)
	require.Nil(t, rate)
	require.Nil(t, keyRate)
	require.Empty(t, keyRates)
	require.ElementsMatch(t, []string{"rate:>30/1m", "key_rate:>10/1m,burst=2", "key_rate[acme]:>5/1m", "rate:30/1m>none",
		"rate:none>", "key_rate:10/1m,burst=2>", "key_rate[acme]:5/1m>"}, changesOf(t, b))
	info, err = b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, taskling.LimitSourceNone, info.RateSource)
	require.Empty(t, info.Keys, "no key is named any more")
}

// TestAKeysRateOverrideIsChangedBesideItsLimit: a key's limit and rate are overridden together or
// one at a time, each recorded; ClearKeyOverrides removes both; a bad rate names the field and
// writes nothing.
func TestAKeysRateOverrideIsChangedBesideItsLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(4))
	ops := b.client.As(taskling.Operator{Name: "alice"})
	two := 2
	five := taskling.Rate{Count: 5, Per: time.Minute}
	require.NoError(t, ops.UpdateKeySettings(b.ctx, b.app, b.task, "acme", taskling.KeySettingsUpdate{Limit: &two, Rate: &five}))
	require.NoError(t, ops.UpdateKeySettings(b.ctx, b.app, b.task, "acme", taskling.KeySettingsUpdate{Rate: &taskling.Rate{}}))
	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Len(t, info.Keys, 1)
	require.Equal(t, taskling.KeyInfo{Key: "acme", Limit: 2, LimitSource: taskling.KeySourceOverride, RateSource: taskling.KeySourceOverride}, info.Keys[0],
		"the limit stays; the rate is overridden to none")

	err = ops.UpdateKeySettings(b.ctx, b.app, b.task, "acme", taskling.KeySettingsUpdate{Rate: &taskling.Rate{Count: 5}})
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.ErrorContains(t, err, "KeySettingsUpdate.Rate")
	err = ops.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeyRate: &taskling.Rate{Count: 1, Per: time.Nanosecond}})
	require.ErrorIs(t, err, taskling.ErrInvalidSettings)
	require.ErrorContains(t, err, "KeyRate")

	require.NoError(t, ops.ClearKeyOverrides(b.ctx, b.app, b.task, "acme"))
	require.Equal(t, []string{"key_rate[acme]:none>", "key_limit[acme]:2>", "key_rate[acme]:5/1m>none", "key_rate[acme]:>5/1m", "key_limit[acme]:>2"},
		changesOf(t, b))
	_, _, keyRates := rateRow(t, b)
	require.Empty(t, keyRates)
}

// TestNextAllowedIsMeasuredFromTheRatesStateOnTheDatabaseClock: a task's and a key's NextAllowed
// are tat − (burst−1)·T − now on the database clock (T = Per/Count), 0 once passed; a declared
// rate shows as declared.
func TestNextAllowedIsMeasuredFromTheRatesStateOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(4))
	ops := b.client.As(taskling.Operator{Name: "alice"})
	three := taskling.Rate{Count: 3, Per: time.Minute, Burst: 3} // T = 20s
	require.NoError(t, ops.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Rate: &three}))
	one := taskling.Rate{Count: 1, Per: time.Minute}
	require.NoError(t, ops.UpdateKeySettings(b.ctx, b.app, b.task, "acme", taskling.KeySettingsUpdate{Rate: &one}))
	_, err := b.pool.Exec(b.ctx, `
WITH d AS (SELECT id FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2),
n AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us),
t AS (UPDATE taskling.task_rate r SET tat_us = n.us + 60000000, declared_key_rate = '7/1000000/1' FROM d, n
      WHERE r.stripe = d.id % 64 AND r.task_id = d.id)
INSERT INTO taskling.key_rate (stripe, task_id, key, tat_us)
SELECT d.id % 64, d.id, k.key, n.us + k.ahead FROM d, n, (VALUES ('acme', 10000000), ('spent', -5000000)) AS k(key, ahead)`, b.app, b.task)
	require.NoError(t, err)
	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.InDelta(t, 20*time.Second, info.NextAllowed, float64(2*time.Second), "60s − 2·20s")
	require.Equal(t, taskling.Rate{Count: 7, Per: time.Second}, info.KeyRate)
	require.Equal(t, taskling.LimitSourceDeclared, info.KeyRateSource)
	keys := map[string]taskling.KeyInfo{}
	for _, k := range info.Keys {
		keys[k.Key] = k
	}
	require.InDelta(t, 10*time.Second, keys["acme"].NextAllowed, float64(2*time.Second))
	page, err := b.client.Tasks(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	require.Equal(t, three, page.Tasks[0].Rate, "the task list shows the rates too")
	require.InDelta(t, 20*time.Second, page.Tasks[0].NextAllowed, float64(2*time.Second))
}

// TestRateStringIsTheProtocolsString: the public Rate writes itself as the protocol's does, so
// that ParseRate reads what either writes.
func TestRateStringIsTheProtocolsString(t *testing.T) {
	t.Parallel()
	for _, r := range []taskling.Rate{{}, {Count: 100, Per: time.Minute}, {Count: 500, Per: time.Second, Burst: 50},
		{Count: 3, Per: 90 * time.Minute, Burst: 1}, {Count: 7, Per: 1500 * time.Millisecond}, {Count: 1, Per: 1234 * time.Microsecond}} {
		require.Equal(t, execution.Rate(r).String(), r.String())
		if !r.IsZero() {
			back, err := taskling.ParseRate(r.String())
			require.NoError(t, err)
			require.Equal(t, max(r.Burst, 1), max(back.Burst, 1))
			require.Equal(t, r.Per, back.Per)
		}
	}
}

// TestOneUnreadableRateNeverFailsTheTaskList: a task whose stored rate does not read (a row
// written by hand, or damaged) is listed without its rates, beside the others with theirs; its own
// view says what does not read.
func TestOneUnreadableRateNeverFailsTheTaskList(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(5, taskling.Rate{Count: 3, Per: time.Hour}, taskling.Rate{}))
	b.start(t, nil)
	b.task = "other"
	b.start(t, nil)
	b.exec(t, `UPDATE taskling.task_rate r SET declared_rate = 'x/"\'||chr(7)||'é' FROM taskling.task_definition d
        WHERE d.id = r.task_id AND d.task_name = 'task'`)
	page, err := b.client.Tasks(b.ctx, nil)
	require.NoError(t, err, "one bad row does not fail the list")
	require.Len(t, page.Tasks, 2)
	for _, ti := range page.Tasks {
		if ti.Task == "other" {
			require.Equal(t, "3/1h", ti.Rate.String(), "the readable task keeps its rate")
		} else {
			require.True(t, ti.Rate.IsZero(), "the unreadable one is listed without")
		}
	}
	_, err = b.client.Task(b.ctx, b.app, "task")
	require.ErrorContains(t, err, "stored rate", "its own view reports it")
}

package taskling_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

func withRates(limit int, rate, keyRate taskling.Rate) *taskling.Config {
	cfg := withLimit(limit)
	cfg.Defaults.Rate, cfg.Defaults.KeyRate = rate, keyRate
	return cfg
}

// rateErr asserts err is a rate refusal and returns it.
func rateErr(t *testing.T, err error) *taskling.RateLimitedError {
	t.Helper()
	require.ErrorIs(t, err, taskling.ErrRateLimited)
	var re *taskling.RateLimitedError
	require.True(t, errors.As(err, &re), "errors.As gives a *RateLimitedError: %v", err)
	return re
}

// TestARateGrantsCountPlusBurstMinusOneAWindowAndSaysWhenToRetry: 3 per hour with a burst of 2:
// two starts at once, then one each 20 minutes; the refused start learns when it would fit, on the
// database clock, and nothing a refusal does consumes the rate. Completing runs gives nothing back.
func TestARateGrantsCountPlusBurstMinusOneAWindowAndSaysWhenToRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(10, taskling.Rate{Count: 3, Per: time.Hour, Burst: 2}, taskling.Rate{}))
	first := b.start(t, nil)
	b.start(t, nil)
	require.NoError(t, first.Complete(b.ctx), "a run that ended still counts")
	for range 3 {
		re := rateErr(t, b.denied(t, nil))
		require.Equal(t, taskling.RateOfTask, re.Limit)
		require.Equal(t, "3/1h,burst=2", re.Rate.String())
		require.InDelta(t, (20 * time.Minute).Seconds(), re.RetryAfter.Seconds(), 5, "one unit is 20 minutes; refusals consume nothing")
		require.NotZero(t, re.Recorded, "the refused attempt is recorded as a blocked execution")
	}
	// 20 minutes later (moved on the database: the tat back by 20 minutes) one more fits, not two.
	// (Every change of a rate's state rewrites the task row: refusals are decided on a cached copy
	// of both until it changes.)
	b.exec(t, `UPDATE taskling.task_rate SET tat_us = tat_us - 1200000000`)
	b.exec(t, `UPDATE taskling.task_definition SET overrides_updated_at = overrides_updated_at`)
	b.start(t, nil)
	rateErr(t, b.denied(t, nil))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE NOT blocked`))
}

// TestAKeysRateRefusesItsKeyOnlyAndAHeadOfLineWaitingForItsRateBlocksNoOne: each key 1 per hour;
// a key that spent its unit is refused with the key's rate named, while other keys start; a waiter
// of the spent key holds no one up (work-conserving).
func TestAKeysRateRefusesItsKeyOnlyAndAHeadOfLineWaitingForItsRateBlocksNoOne(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(5, taskling.Rate{}, taskling.Rate{Count: 1, Per: time.Hour}))
	b.start(t, &taskling.StartOptions{Key: "acme"})
	re := rateErr(t, b.denied(t, &taskling.StartOptions{Key: "acme"}))
	require.Equal(t, taskling.RateOfKey, re.Limit)
	require.Equal(t, "acme", re.Key)
	require.ErrorContains(t, re, `the rate 1/1h of key "acme" has no room`)

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		_, err := b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{Key: "acme", WaitForSlot: true})
		waited <- err
	}()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.key_ticket WHERE key = 'acme'`) == 1
	}, 10*time.Second, 10*time.Millisecond, "acme's start waits in line")
	b.start(t, &taskling.StartOptions{Key: "globex"}) // no barging means: only past a waiter that could start now
	b.start(t, &taskling.StartOptions{Key: "initech"})
	cancel()
	require.ErrorIs(t, <-waited, taskling.ErrRateLimited, "it gave up waiting for its key's rate")
}

// TestAWaiterIsWokenWhenItsRateHasRoom: no release wakes a waiter held back by a rate; it is
// granted once the rate has room, never before (database grant times), and not much after.
func TestAWaiterIsWokenWhenItsRateHasRoom(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(10, taskling.Rate{Count: 4, Per: time.Second}, taskling.Rate{}))
	began := time.Now()
	for range 4 {
		e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
		require.NoError(t, err)
		require.NoError(t, e.Complete(b.ctx))
	}
	require.Less(t, time.Since(began), 3*time.Second, "three waits of 250 ms each, not polls of seconds")
	var gaps []float64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT array_agg(extract(epoch FROM g)) FROM (
        SELECT started_at - lag(started_at) OVER (ORDER BY started_at) AS g FROM taskling.task_execution) x WHERE g IS NOT NULL`).Scan(&gaps))
	require.Len(t, gaps, 3)
	for _, g := range gaps {
		require.GreaterOrEqual(t, g, 0.249, "granted before its rate had room: %v", gaps)
	}
}

// TestACostAboveARatesBurstIsRefusedNamingTheField: a cost takes that many units at once, so a
// cost above a rate's burst could never start.
func TestACostAboveARatesBurstIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(10, taskling.Rate{Count: 10, Per: time.Minute, Burst: 2}, taskling.Rate{}))
	err := b.denied(t, &taskling.StartOptions{Cost: 3})
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.ErrorContains(t, err, "StartOptions.Cost is 3; above the burst 2 of the task's rate")
	b.start(t, &taskling.StartOptions{Cost: 2})
	re := rateErr(t, b.denied(t, &taskling.StartOptions{Cost: 1}))
	require.InDelta(t, (6 * time.Second).Seconds(), re.RetryAfter.Seconds(), 1, "a cost of 2 took two units of 6 s")
}

// TestOnANewTimelineARateGrantsNothingForOnePer: a failover may lose the rate's state, and the new
// primary's clock may differ: for one Per after the timeline is first seen the rate grants nothing.
func TestOnANewTimelineARateGrantsNothingForOnePer(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(10, taskling.Rate{Count: 100, Per: 2 * time.Second, Burst: 10}, taskling.Rate{}))
	b.start(t, nil)
	forgetTimeline(t, b)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "first the hold of one death threshold (1 s) of every grant")
	time.Sleep(1200 * time.Millisecond)
	re := rateErr(t, b.denied(t, nil))
	require.Greater(t, re.RetryAfter, 300*time.Millisecond, "then the rate's, for one Per (2 s) from the switch")
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_execution e, taskling.epoch p
        WHERE NOT e.blocked AND e.started_at >= p.since + interval '2 seconds'`), "the waiter was granted once the Per had passed")
}

// TestAKeysRateStateGoesOnlyOnceSpent: a key's row of rate state is kept while its tat is ahead
// of the clock, and deleted by a later transaction of the task once spent with no holder or waiter.
func TestAKeysRateStateGoesOnlyOnceSpent(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(10, taskling.Rate{}, taskling.Rate{Count: 10, Per: time.Second}))
	e := b.start(t, &taskling.StartOptions{Key: "acme"})
	require.NoError(t, e.Complete(b.ctx))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.key_rate WHERE key = 'acme'`), "not spent yet: kept")
	time.Sleep(150 * time.Millisecond)
	b.start(t, &taskling.StartOptions{Key: "acme"})
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.key_rate WHERE key = 'acme'`), "moved on, not deleted")
	b.exec(t, `UPDATE taskling.key_rate SET tat_us = 0`)
	other := b.start(t, &taskling.StartOptions{Key: "globex"})
	require.NoError(t, other.Complete(b.ctx))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.key_rate WHERE key = 'acme'`), "acme still holds a run: kept")
}

// TestRatesHoldOverEveryWindowUnderContention: two clients (processes) of 6 goroutines each start
// plain and waiting runs of costs 1–2 under four keys, as fast as they can, at both isolation
// levels: over every window of the database's start times, the task's rate and each key's hold.
func TestRatesHoldOverEveryWindowUnderContention(t *testing.T) {
	t.Parallel()
	for name, level := range map[string]taskling.Isolation{"read committed": taskling.IsolationReadCommitted,
		"serializable": taskling.IsolationSerializable} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			task, key := taskling.Rate{Count: 40, Per: 500 * time.Millisecond, Burst: 4}, taskling.Rate{Count: 20, Per: 500 * time.Millisecond, Burst: 2}
			cfg := withRates(6, task, key)
			cfg.Isolation = level
			b := setup(t, cfg)
			clients := []*taskling.Client{b.client, newClient(t, b.pool, cfg)}
			ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					opts := &taskling.StartOptions{Key: []string{"a", "b", "c", "d"}[g%4], Cost: 1 + g%2, WaitForSlot: g%3 == 0}
					for ctx.Err() == nil {
						e, err := clients[g%2].StartExecution(ctx, b.app, b.task, opts)
						if err == nil {
							time.Sleep(time.Millisecond)
							_ = e.Complete(context.Background())
						}
					}
				}()
			}
			wg.Wait()
			type grant struct {
				at   time.Time
				key  string
				cost int
			}
			rows, err := b.pool.Query(b.ctx, `SELECT started_at, key, cost FROM taskling.task_execution WHERE NOT blocked ORDER BY started_at`)
			require.NoError(t, err)
			var grants []grant
			for rows.Next() {
				var g grant
				require.NoError(t, rows.Scan(&g.at, &g.key, &g.cost))
				grants = append(grants, g)
			}
			require.NoError(t, rows.Err())
			worst := func(key string) int {
				most := 0
				for i, g := range grants {
					if key != "*" && g.key != key {
						continue
					}
					sum := 0
					for _, h := range grants[i:] {
						if h.at.Sub(g.at) < 500*time.Millisecond && (key == "*" || h.key == key) {
							sum += h.cost
						}
					}
					most = max(most, sum)
				}
				return most
			}
			require.Greater(t, len(grants), 40, "the rates were put to the test")
			require.LessOrEqual(t, worst("*"), 40+4-1, "the task's rate over a window")
			require.GreaterOrEqual(t, worst("*"), 32, "demand above the rate nearly fills a window (the rate does not sit idle)")
			for _, k := range []string{"a", "b", "c", "d"} {
				require.LessOrEqual(t, worst(k), 20+2-1, "key %s's rate over a window", k)
			}
		})
	}
}

// TestWorkDefersWhatARateRefusesAndRunsOthersMeanwhile: each key 1 per hour. A worker runs the
// first of acme's three submissions and those of the other keys; acme's next two are deferred
// (not failed: no attempt is spent) and stay waiting, while one worker serves everything else. A
// task rate (5 an hour, all at once) with no room pauses the claims: nothing runs past it.
func TestWorkDefersWhatARateRefusesAndRunsOthersMeanwhile(t *testing.T) {
	t.Parallel()
	cfg := withRates(4, taskling.Rate{Count: 5, Per: time.Hour, Burst: 5}, taskling.Rate{Count: 1, Per: time.Hour})
	b := setup(t, cfg)
	var acme []int64
	for _, key := range []string{"acme", "acme", "acme", "globex", "initech"} {
		id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: key})
		require.NoError(t, err)
		if key == "acme" {
			acme = append(acme, id)
		}
	}
	ran := make(chan string, 10)
	b.work(t, b.client, func(_ context.Context, e *taskling.Execution) error {
		ran <- e.Key()
		return nil
	}, &taskling.WorkOptions{Workers: 1})
	got := map[string]int{}
	for range 3 {
		select {
		case k := <-ran:
			got[k]++
		case <-time.After(15 * time.Second):
			t.Fatalf("only %v ran", got)
		}
	}
	require.Equal(t, map[string]int{"acme": 1, "globex": 1, "initech": 1}, got)
	b.waitStatus(t, acme[0], taskling.SubmissionCompleted)
	time.Sleep(300 * time.Millisecond)
	for _, id := range acme[1:] {
		sub, err := b.client.Submission(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, taskling.SubmissionWaiting, sub.Status, "deferred, not failed")
		require.Zero(t, sub.Attempts, "a rate's refusal spends no attempt")
	}
	for _, key := range []string{"hooli", "umbrella", "wayne"} { // the task's 5 an hour: 2 more
		_, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: key})
		require.NoError(t, err)
	}
	for range 2 {
		select {
		case <-ran:
		case <-time.After(15 * time.Second):
			t.Fatal("the task's rate had room for two more")
		}
	}
	select {
	case k := <-ran:
		t.Fatalf("%s ran past the task's rate", k)
	case <-time.After(time.Second):
	}
	require.Equal(t, 5, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE NOT blocked`))
}

// TestARateChangedAtRunTimeAppliesAtOnce: an operator who raises a rate admits at once (the units
// owed are counted at the new rate's interval); one who lowers it makes the next start wait
// longer; overriding it to none lifts it; each through the override, on the next start.
func TestARateChangedAtRunTimeAppliesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(10, taskling.Rate{Count: 2, Per: time.Hour, Burst: 2}, taskling.Rate{}))
	b.start(t, nil)
	b.start(t, nil)
	re := rateErr(t, b.denied(t, nil))
	require.InDelta(t, (30 * time.Minute).Seconds(), re.RetryAfter.Seconds(), 5)

	raised := taskling.Rate{Count: 60, Per: time.Minute, Burst: 2} // an hour's owed units become 2 s
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Rate: &raised}))
	re = rateErr(t, b.denied(t, nil))
	require.Equal(t, raised.String(), re.Rate.String(), "the override is in force")
	require.Less(t, re.RetryAfter, 2*time.Second, "the owed units count at the raised rate's interval")
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true})
	require.NoError(t, err)
	require.NoError(t, e.Complete(b.ctx))

	lowered := taskling.Rate{Count: 1, Per: time.Hour}
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Rate: &lowered}))
	re = rateErr(t, b.denied(t, nil))
	require.Greater(t, re.RetryAfter, 30*time.Minute, "a lowered rate: the owed units take its longer interval")

	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{Rate: &taskling.Rate{}}))
	b.start(t, nil) // overridden to none
}

// TestARefusalByARateNeedsNoLock: a start its rate refuses is decided on this process's copy of
// the task row and its rate, and recorded without the row's lock: it is refused at once while
// another transaction holds that lock, and recorded like any refusal.
func TestARefusalByARateNeedsNoLock(t *testing.T) {
	t.Parallel()
	b := setup(t, withRates(10, taskling.Rate{Count: 1, Per: time.Hour}, taskling.Rate{}))
	b.start(t, nil)
	rateErr(t, b.denied(t, nil)) // read under the lock: the process now knows the rate's state
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	// As a token transaction holds it (its insert's foreign key check needs no more).
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM taskling.task_definition WHERE task_name = $1 FOR NO KEY UPDATE`, b.task)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	_, err = b.client.StartExecution(ctx, b.app, b.task, nil)
	re := rateErr(t, err)
	require.NotZero(t, re.Recorded, "recorded as a blocked execution")
	require.InDelta(t, time.Hour.Seconds(), re.RetryAfter.Seconds(), 5)
	require.NoError(t, tx.Rollback(b.ctx))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE blocked AND blocked_reason LIKE '%rate%'`))
}

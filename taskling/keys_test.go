package taskling_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

func withKeys(limit, keyLimit int, keys map[string]taskling.KeySettings) *taskling.Config {
	cfg := withLimit(limit)
	cfg.Defaults.KeyLimit = keyLimit
	cfg.Defaults.Keys = keys
	return cfg
}

func TestAKeyAtItsLimitIsRefusedWhileOtherKeysStart(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(5, 2, map[string]taskling.KeySettings{"acme": {Limit: 3}}))
	for range 2 {
		b.start(t, &taskling.StartOptions{Key: "globex"})
	}
	err := b.denied(t, &taskling.StartOptions{Key: "globex"})
	require.ErrorIs(t, err, taskling.ErrKeyLimitReached)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	require.ErrorContains(t, err, `key "globex" is at its limit 2`)
	for range 3 {
		b.start(t, &taskling.StartOptions{Key: "acme"}) // a named key's own limit
	}
	err = b.denied(t, &taskling.StartOptions{Key: "initech"})
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	require.NotErrorIs(t, err, taskling.ErrKeyLimitReached, "the task's 5 slots are held: the task's limit refused it")
}

func TestACostTakesItsSlotsTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(4))
	big := b.start(t, &taskling.StartOptions{Cost: 3})
	b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "3 + 1 of 4 are held")
	require.NoError(t, big.Complete(b.ctx))
	b.start(t, &taskling.StartOptions{Cost: 2})
	b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	err := b.denied(t, &taskling.StartOptions{Cost: 5})
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.ErrorContains(t, err, "StartOptions.Cost is 5; above the task's limit 4")
}

func TestTheEmptyKeyIsAKeyUnderAKeyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(5, 1, nil))
	b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrKeyLimitReached)
	b.start(t, &taskling.StartOptions{Key: "other"})
}

func TestKeyedWaitersTakeTurnsAcrossKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(1, 0, nil))
	holder := b.start(t, &taskling.StartOptions{Key: "a"})
	type got struct {
		key string
		e   *taskling.Execution
	}
	grants := make(chan got, 10)
	wait := func(key string) {
		go func() {
			e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{Key: key, WaitForSlot: true})
			if err != nil {
				t.Error(err)
				return
			}
			grants <- got{key, e}
		}()
	}
	queued := 0
	for _, key := range []string{"a", "a", "a", "b", "c"} { // a's queue first; each queued before the next
		wait(key)
		queued++
		require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM taskling.key_ticket`) == queued }, 10*time.Second,
			5*time.Millisecond, "keyed waiters queue outside the task row")
	}
	require.NoError(t, holder.Complete(b.ctx))
	var order []string
	for range 5 {
		select {
		case g := <-grants:
			order = append(order, g.key)
			require.NoError(t, g.e.Complete(b.ctx))
		case <-time.After(10 * time.Second):
			t.Fatalf("waiters stalled after %v", order)
		}
	}
	// a waited first, so it goes first; then b and c, which were served less, before a's second.
	require.Equal(t, []string{"a", "b", "c", "a", "a"}, order)
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.task_key`), "a key's row goes with its last waiter and holder")
}

func TestKeyedStartUnderAHeavyKeyDoesNotIdleTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(3, 1, nil))
	b.start(t, &taskling.StartOptions{Key: "a"})
	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	_, err := b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{Key: "a", WaitForSlot: true})
	require.ErrorIs(t, err, taskling.ErrKeyLimitReached, "a waits for its key")
	b.start(t, &taskling.StartOptions{Key: "b"}) // not behind a's waiter
}

// TestWorkClaimsOnlySubmissionsWhoseKeyHasRoom is rule 3: with a key at its limit, workers claim
// the other keys' submissions instead of sitting on claims for the full one, and a key's refusal
// costs its submissions no attempt.
func TestWorkClaimsOnlySubmissionsWhoseKeyHasRoom(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(4, 1, map[string]taskling.KeySettings{"b": {Limit: 2}}))
	var subs []int64
	for range 4 {
		id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: "a"})
		require.NoError(t, err)
		subs = append(subs, id)
	}
	last, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: "b", Cost: 2})
	require.NoError(t, err)
	release := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	running := map[string]int{}
	most := map[string]int{}
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		mu.Lock()
		running[e.Key()] += e.Cost()
		most[e.Key()] = max(most[e.Key()], running[e.Key()])
		mu.Unlock()
		<-release
		mu.Lock()
		running[e.Key()] -= e.Cost()
		mu.Unlock()
		return nil
	}, &taskling.WorkOptions{Workers: 4})
	t.Cleanup(done)                                      // before Work's own cleanup waits for the runs
	b.waitStatus(t, last, taskling.SubmissionInProgress) // b's run is not held up behind a's queue
	time.Sleep(300 * time.Millisecond)                   // the idle workers try to claim meanwhile
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.submission WHERE key = 'a' AND status = 1 AND claimed_by IS NOT NULL`),
		"no worker sits on a claim for the full key a")
	done()
	for _, id := range subs {
		sub := b.waitStatus(t, id, taskling.SubmissionCompleted)
		require.Equal(t, 1, sub.Attempts, "a key's refusal spends no attempt")
		require.Equal(t, "a", sub.Key)
		require.Equal(t, 1, sub.Cost)
	}
	require.Equal(t, 2, b.waitStatus(t, last, taskling.SubmissionCompleted).Cost)
	require.Equal(t, map[string]int{"a": 1, "b": 2}, most)
}

// TestWorkHonoursAKeyLimitOnlyTheOperatorSet: a task declared without keys, whose KeyLimit the
// operator overrode to 1, holds its unkeyed submissions (key "") to one at a time, and its idle
// workers sit on no claim for them meanwhile (the claim's one-round-trip path for unkeyed tasks
// yields to the full claim once the operator limits keys).
func TestWorkHonoursAKeyLimitOnlyTheOperatorSet(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(4))
	one := 1
	require.NoError(t, b.client.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeyLimit: &one}))
	var subs []int64
	for range 3 {
		id, err := b.client.Submit(b.ctx, b.app, b.task, nil)
		require.NoError(t, err)
		subs = append(subs, id)
	}
	release := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	var running, most atomic.Int32
	b.work(t, b.client, func(ctx context.Context, e *taskling.Execution) error {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		return nil
	}, &taskling.WorkOptions{Workers: 3})
	t.Cleanup(done)
	b.waitStatus(t, subs[0], taskling.SubmissionInProgress)
	time.Sleep(300 * time.Millisecond) // the idle workers try to claim meanwhile
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.submission WHERE status = 1 AND claimed_by IS NOT NULL`),
		"no worker sits on a claim for the full key \"\"")
	done()
	for _, id := range subs {
		require.Equal(t, 1, b.waitStatus(t, id, taskling.SubmissionCompleted).Attempts)
	}
	require.EqualValues(t, 1, most.Load())
}

// TestASubmissionCostlierThanItsKeysLimitEndsDeadNamingTheCost: Work claims it like any other (it
// is not passed over forever), and each attempt is refused naming SubmitOptions.Cost.
func TestASubmissionCostlierThanItsKeysLimitEndsDeadNamingTheCost(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(4, 1, nil))
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: "a", Cost: 2, MaxAttempts: 2})
	require.NoError(t, err)
	b.work(t, b.client, func(context.Context, *taskling.Execution) error { return nil }, nil)
	sub := b.waitStatus(t, id, taskling.SubmissionDead)
	require.Equal(t, 2, sub.Attempts)
	require.Contains(t, sub.LastError, `SubmitOptions.Cost is 2; above the limit 1 of key "a"`)
}

// TestOperatorOverridesOfKeysWinAndAreRecorded: the override of KeyLimit and of a named key win
// over every host's declaration at the next start, are shown with their sources, recorded in the
// audit trail, and cleared with the other overrides; raising a key's limit admits its waiter at
// once.
func TestOperatorOverridesOfKeysWinAndAreRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(10, 1, map[string]taskling.KeySettings{"acme": {Limit: 2}}))
	b.start(t, &taskling.StartOptions{Key: "acme"})
	b.start(t, &taskling.StartOptions{Key: "acme"})
	waiting := make(chan error, 1)
	go func() {
		e, err := b.client.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{Key: "acme", WaitForSlot: true})
		if err == nil {
			err = e.Complete(b.ctx)
		}
		waiting <- err
	}()
	time.Sleep(100 * time.Millisecond)
	five, three := 5, 3
	ops := b.client.As(taskling.Operator{Name: "alice"})
	require.NoError(t, ops.UpdateKeySettings(b.ctx, b.app, b.task, "acme", taskling.KeySettingsUpdate{Limit: &five}))
	select {
	case err := <-waiting:
		require.NoError(t, err, "a raised key limit admits its waiter at once")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not admitted")
	}
	require.NoError(t, ops.UpdateTaskSettings(b.ctx, b.app, b.task, taskling.SettingsUpdate{KeyLimit: &three}))
	for range 3 {
		b.start(t, &taskling.StartOptions{Key: "globex"}) // 3, not the declared 1
	}
	require.ErrorIs(t, b.denied(t, &taskling.StartOptions{Key: "globex"}), taskling.ErrKeyLimitReached)

	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, 3, info.KeyLimit)
	require.Equal(t, taskling.LimitSourceOverride, info.KeyLimitSource)
	require.Equal(t, 3, *info.Overrides.KeyLimit)
	keys := map[string]taskling.KeyInfo{}
	for _, k := range info.Keys {
		keys[k.Key] = k
	}
	require.Equal(t, taskling.KeyInfo{Key: "acme", Holders: 2, CostInUse: 2, Limit: 5, LimitSource: taskling.KeySourceOverride,
		RateSource: taskling.KeySourceNone}, keys["acme"])
	require.Equal(t, taskling.KeyInfo{Key: "globex", Holders: 3, CostInUse: 3, Limit: 3, LimitSource: taskling.KeySourceKeyLimitOverride,
		RateSource: taskling.KeySourceNone}, keys["globex"])
	require.Equal(t, "globex", info.Keys[0].Key, "the busiest key first")

	require.NoError(t, ops.ClearOverrides(b.ctx, b.app, b.task))
	require.ElementsMatch(t, []string{"key_limit[acme]:>5", "key_limit:>3", "key_limit:3>", "key_limit[acme]:5>"}, changesOf(t, b))
	info, err = b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, taskling.LimitSourceDeclared, info.KeyLimitSource)
	require.Equal(t, 1, info.KeyLimit)
}

// TestAScheduledRunRefusedByItsKeyFollowsItsOverlapPolicy: under OverlapSkip an on-time instant
// whose key is at its limit is recorded Blocked, naming the key's limit.
func TestAScheduledRunRefusedByItsKeyFollowsItsOverlapPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(3, 1, nil))
	b.task = "cron"
	b.start(t, &taskling.StartOptions{Key: "nightly"})
	require.ErrorContains(t, b.client.Schedule(b.ctx, b.app, b.task, "* * * * * *", func(context.Context, *taskling.Execution) error { return nil },
		&taskling.ScheduleOptions{Key: "nightly", Cost: -1, Settings: taskling.TaskSettings{ConcurrencyLimit: 3, KeyLimit: 1}}), "ScheduleOptions.Cost is -1")
	require.NoError(t, b.client.Schedule(b.ctx, b.app, b.task, "* * * * * *", func(context.Context, *taskling.Execution) error { return nil },
		&taskling.ScheduleOptions{Key: "nightly", Settings: taskling.TaskSettings{ConcurrencyLimit: 3, KeyLimit: 1}}))
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- b.client.RunScheduler(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE blocked AND scheduled_for IS NOT NULL AND key = 'nightly'
			AND blocked_reason = 'its key''s limit reached'`) > 0
	}, 10*time.Second, 50*time.Millisecond, "the instant is recorded Blocked by its key's limit")
}

// TestAKeyedWaiterWhoseLeaveFailsLeavesLater: a waiter gives up while its task's row is locked
// (as while the server restarts), so its leave fails; it retries in the background and its ticket
// goes once the row is free, rather than holding its key's line as long as its process lives.
func TestAKeyedWaiterWhoseLeaveFailsLeavesLater(t *testing.T) {
	t.Parallel()
	b := setup(t, withKeys(4, 1, nil))
	b.start(t, &taskling.StartOptions{Key: "a"})
	ctx, cancel := context.WithTimeout(b.ctx, time.Second)
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		_, err := b.client.StartExecution(ctx, b.app, b.task, &taskling.StartOptions{Key: "a", WaitForSlot: true})
		gaveUp <- err
	}()
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM taskling.key_ticket`) == 1 }, 5*time.Second,
		10*time.Millisecond, "the waiter queues")
	lock, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = lock.Exec(b.ctx, `SELECT 1 FROM taskling.task_definition FOR NO KEY UPDATE`)
	require.NoError(t, err)
	select {
	case err := <-gaveUp: // once its leave timed out on the lock
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not give up")
	}
	require.NoError(t, lock.Rollback(b.ctx))
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM taskling.key_ticket`) == 0 }, 5*time.Second,
		50*time.Millisecond, "the ticket of a waiter that gave up stays queued")
}

// TestAnOverriddenEmptyKeyIsListedAndEnforced is issue 40 item 8: an override of the empty key's
// limit (or a declared named key "") was stored and enforced, yet a task whose starts carry no
// key listed no keys at all ("No keys in use" in `tasks keys show`).
func TestAnOverriddenEmptyKeyIsListedAndEnforced(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(4))
	one := 1
	require.NoError(t, b.client.UpdateKeySettings(b.ctx, b.app, b.task, "", taskling.KeySettingsUpdate{Limit: &one}))
	info, err := b.client.Task(b.ctx, b.app, b.task)
	require.NoError(t, err)
	require.Equal(t, []taskling.KeyInfo{{Key: "", Limit: 1, LimitSource: taskling.KeySourceOverride, RateSource: taskling.KeySourceNone}}, info.Keys)
	require.Equal(t, 1, info.KeysTotal)
	b.start(t, nil)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrKeyLimitReached, "enforced")

	d := setup(t, withKeys(4, 0, map[string]taskling.KeySettings{"": {Limit: 2}}))
	d.start(t, nil)
	info, err = d.client.Task(d.ctx, d.app, d.task)
	require.NoError(t, err)
	require.Equal(t, []taskling.KeyInfo{{Key: "", Holders: 1, CostInUse: 1, Limit: 2, LimitSource: taskling.KeySourceDeclaredKey, RateSource: taskling.KeySourceNone}}, info.Keys)
}

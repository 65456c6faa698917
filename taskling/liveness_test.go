package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskling-go/taskling/taskling"
)

// The threshold in these tests is 1s; the local safety margin is 25% of it.
const threshold = time.Second

func TestKeepAliveDeathIsReclaimedAfterThresholdNotBefore(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	time.Sleep(3 * fast.KeepAliveInterval) // heartbeats keep it alive past several intervals
	holder.StopHeartbeatForTest()          // the holder's process freezes
	stoppedAt := time.Now()

	time.Sleep(threshold / 2)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "not reclaimed before the threshold")
	require.False(t, leaseLost(holder))

	// The holder cancels itself at threshold - margin, before anyone may reclaim.
	select {
	case <-holder.Context().Done():
	case <-time.After(threshold):
		t.Fatal("holder's context was not cancelled")
	}
	require.ErrorIs(t, context.Cause(holder.Context()), taskling.ErrLeaseLost)
	require.Less(t, time.Since(stoppedAt), threshold, "cancelled before the threshold")

	time.Sleep(time.Until(stoppedAt.Add(threshold + 100*time.Millisecond)))
	next := b.start(t, nil)
	require.Greater(t, next.FencingToken(), holder.FencingToken())

	// The old holder's release cannot free the slot now held by the new execution.
	require.ErrorIs(t, holder.Complete(b.ctx), taskling.ErrLeaseLost)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	require.False(t, leaseLost(next))

	infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 10)
	require.NoError(t, err)
	require.Equal(t, taskling.StatusDead, infoByID(t, infos, holder.ID()).Status)
	require.False(t, infoByID(t, infos, holder.ID()).ReclaimedAt.IsZero())
}

func TestOverrideDeathIsReclaimedAfterThresholdSinceStart(t *testing.T) {
	t.Parallel()
	b := setup(t, &taskling.Config{Defaults: taskling.TaskSettings{DeathMode: taskling.DeathModeOverride, OverrideThreshold: threshold}})
	holder := b.start(t, nil)
	startedAt := time.Now()

	time.Sleep(threshold / 2)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	require.False(t, leaseLost(holder))

	<-holder.Context().Done()
	require.ErrorIs(t, context.Cause(holder.Context()), taskling.ErrLeaseLost)
	require.Less(t, time.Since(startedAt), threshold)

	time.Sleep(time.Until(startedAt.Add(threshold + 100*time.Millisecond)))
	next := b.start(t, nil)
	require.ErrorIs(t, holder.Complete(b.ctx), taskling.ErrLeaseLost)
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached, "the new holder keeps its slot")
	require.NoError(t, next.Complete(b.ctx))
}

// One heartbeat renews every execution of a process; the one it finds reclaimed (recorded here
// as a reclaimer records it) is cancelled, and only that one.
func TestHeartbeatThatFindsItsExecutionReclaimedLosesTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	holder := b.start(t, nil)
	other := b.start(t, nil)
	b.exec(t, `INSERT INTO taskling.execution_end (execution_id, outcome) VALUES ($1, 3)`, holder.ID())
	select {
	case <-holder.Context().Done():
	case <-time.After(threshold / 2):
		t.Fatal("a heartbeat should have found the execution reclaimed")
	}
	require.ErrorIs(t, context.Cause(holder.Context()), taskling.ErrLeaseLost)
	time.Sleep(threshold) // more heartbeats than one lease: the other lives on them
	require.False(t, leaseLost(other))
	require.NoError(t, other.Complete(b.ctx))
}

func TestGranteeWithMissingExecutionRowCountsAsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	require.NoError(t, b.start(t, nil).Complete(b.ctx))
	b.exec(t, `UPDATE taskling.task_definition SET tokens = 'I:6f1c0f4e-8d0a-4c55-9d43-0c8a1b0e2f11,S:0,G:987654321'`)
	e := b.start(t, nil)
	require.NoError(t, e.Complete(b.ctx))
}

func TestHeartbeatsKeepALongRunningHolderAlive(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	time.Sleep(2 * threshold)
	require.False(t, leaseLost(holder))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	require.NoError(t, holder.Complete(b.ctx))
	require.ErrorIs(t, holder.Context().Err(), context.Canceled, "Complete ends the execution's context")
	require.NoError(t, holder.Complete(b.ctx), "Complete is idempotent")
}

func TestExecutionContextKeepsValuesButNotCancellationOfStartContext(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	type key struct{}
	ctx, cancel := context.WithTimeout(context.WithValue(b.ctx, key{}, "v"), time.Minute)
	e, err := b.client.StartExecution(ctx, b.app, b.task, nil)
	require.NoError(t, err)
	cancel()
	require.NoError(t, e.Context().Err())
	require.Equal(t, "v", e.Context().Value(key{}))
	require.NoError(t, e.Complete(b.ctx))
}

func infoByID(t *testing.T, infos []taskling.ExecutionInfo, id int64) taskling.ExecutionInfo {
	t.Helper()
	for _, i := range infos {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("execution %d not in history", id)
	return taskling.ExecutionInfo{}
}

// The lease is measured from the round trip that writes the grant, not from the first one: a
// start that waited for the task row's lock longer than the lease (behind a slow host, say) still
// gets a whole lease. Found by the chaos tests, where such holders were cancelled before working.
func TestLeaseCountsFromTheGrantNotFromTheWaitForTheRowLock(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	require.NoError(t, b.start(t, nil).Complete(b.ctx))

	// Another host holds the task row's lock for longer than the lease (0.75 s).
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM taskling.task_definition FOR UPDATE`)
	require.NoError(t, err)
	go func() {
		time.Sleep(threshold)
		_ = tx.Commit(context.Background())
	}()

	e := b.start(t, nil)
	require.NoError(t, e.Context().Err(), "granted with its lease already spent")
	time.Sleep(threshold / 2)
	require.False(t, leaseLost(e))
	require.NoError(t, e.Complete(b.ctx))
}

// TestListenerFailuresAreLogged is issue 15 item 13: the LISTEN connection's failures were
// silent. It now lives on a pool connection and reports through Config.Logger.
func TestListenerFailuresAreLogged(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	b := setup(t, nil)
	c := newClient(t, b.pool, &taskling.Config{Logger: zap.New(core), Defaults: fast})
	holder, err := c.StartExecution(b.ctx, "app", "listen", nil)
	require.NoError(t, err)
	defer holder.Complete(b.ctx)
	waitCtx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	go func() { _, _ = c.StartExecution(waitCtx, "app", "listen", &taskling.StartOptions{WaitForSlot: true}) }()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN taskling_slots' AND datname = current_database()`) == 1
	}, 5*time.Second, 20*time.Millisecond, "the waiter's client listens")
	b.exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'LISTEN taskling_slots' AND datname = current_database()`)
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("notification listener failed").Len() > 0
	}, 5*time.Second, 20*time.Millisecond)
	entry := logs.FilterMessageSnippet("notification listener failed").All()[0]
	require.Contains(t, entry.ContextMap(), "retry_in")
}

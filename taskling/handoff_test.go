package taskling_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// firstTicket waits until the task's queue has a ticket and returns it, and whether it is direct
// (an odd offer window).
func firstTicket(t *testing.T, b *testBundle) (id int64, direct bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.task_definition WHERE queue <> ''`) == 1
	}, 10*time.Second, 5*time.Millisecond)
	var x int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT (regexp_match(queue, 'W:([0-9]+)'))[1]::bigint, (regexp_match(queue, 'X:([0-9]+)'))[1]::bigint
		FROM taskling.task_definition WHERE queue <> ''`).Scan(&id, &x))
	return id, x%2 == 1
}

// A release grants its slot to the waiter first in line in its own transaction: the waiter's
// execution is its ticket, with the next fence, and no grant is left to take.
func TestAReleasedSlotGoesStraightToTheWaiterFirstInLine(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	other := newClient(t, b.pool, &taskling.Config{HostName: "other-host", Defaults: withLimit(1).Defaults})
	waited := b.waitIn(b.ctx, other, 0)
	ticket, direct := firstTicket(t, b)
	require.True(t, direct, "a plain waiter's ticket is direct")

	require.NoError(t, holder.Complete(b.ctx))
	got := <-waited
	require.NoError(t, got.err)
	t.Cleanup(func() { _ = got.exec.Complete(context.Background()) })
	require.Equal(t, ticket, got.exec.ID(), "the slot was granted to the ticket, not by an acquire of its own")
	require.Equal(t, holder.FencingToken()+1, got.exec.FencingToken())
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.handoff`), "taken")
	infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 5)
	require.NoError(t, err)
	require.Equal(t, taskling.StatusInProgress, infoByID(t, infos, got.exec.ID()).Status)
	require.Equal(t, "other-host", infoByID(t, infos, got.exec.ID()).Host)

	// It holds the slot like any holder: heartbeats keep it past its threshold, and its release
	// frees the slot.
	time.Sleep(2 * fast.KeepAliveDeathThreshold)
	require.False(t, leaseLost(got.exec))
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
	require.NoError(t, got.exec.Complete(b.ctx))
	b.start(t, nil)
}

// A grant the waiter first in line does not take (its process hangs: its session lives on)
// lapses after the ticket's offer window, and the slot goes to the next waiter long before the
// death threshold.
func TestAGrantNobodyTakesLapsesToTheNextWaiter(t *testing.T) {
	t.Parallel()
	cfg := &taskling.Config{Defaults: taskling.TaskSettings{ConcurrencyLimit: 1, KeepAliveInterval: time.Second, KeepAliveDeathThreshold: 20 * time.Second}}
	b := setup(t, cfg)
	holder := b.start(t, nil)
	// A live session whose waiter will never take its grant: a direct ticket with an offer window
	// of 1 s (X odd), written ahead of every real waiter.
	hung := newClient(t, b.pool, cfg)
	keeper, err := hung.StartExecution(b.ctx, b.app, "elsewhere", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = keeper.Complete(context.Background()) })
	const ticket = int64(1) << 50
	b.exec(t, fmt.Sprintf(`UPDATE taskling.task_definition d SET queue = 'W:%d,P:' || s.session_id || ',R:0,Q:' ||
		(extract(epoch FROM clock_timestamp()) * 1000000)::bigint || ',O:0,D:20000000,X:1000001'
		FROM taskling.task_execution s WHERE s.id = $1 AND d.task_name = 'task'`, ticket), keeper.ID())

	waited := b.waitIn(b.ctx, newClient(t, b.pool, cfg), 0)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.task_definition WHERE queue LIKE '%|W:%'`) == 1
	}, 10*time.Second, 5*time.Millisecond, "the waiter queues behind the hung ticket")
	released := time.Now()
	require.NoError(t, holder.Complete(b.ctx))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.handoff WHERE exec_id = $1`, ticket), "granted to the hung ticket")

	got := <-waited
	require.NoError(t, got.err)
	t.Cleanup(func() { _ = got.exec.Complete(context.Background()) })
	waitedFor := time.Since(released)
	t.Logf("the next waiter got the slot %s after the release (offer window 1 s, threshold 20 s)", waitedFor)
	require.Less(t, waitedFor, 10*time.Second)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.handoff WHERE exec_id = $1 AND lapsed_at IS NOT NULL`, ticket),
		"the grant was taken back, and its record kept")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE id = $1`, ticket), "and never started")
	require.Greater(t, got.exec.FencingToken(), holder.FencingToken()+1, "the lapsed grant used a fence")
	require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)
}

// TestHandoffUpgradeServesTheWaitersQueuedBefore: 0013 (handoff, grant protocol 4) on a database of
// 0012 with a holder and a waiter queued by the old rules: the waiter gets the slot when it is
// released, and the next waiter's ticket is direct.
func TestHandoffUpgradeServesTheWaitersQueuedBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 12))
	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(1))), app: "app", task: "task"}
	holder := b.start(t, nil)
	waiter := newClient(t, pool, noAutoCleanup(withLimit(1)))
	first := b.waitIn(ctx, waiter, 0)
	_, direct := firstTicket(t, b)
	require.False(t, direct, "queued before the migration")

	require.NoError(t, migrations.Up(ctx, pool))
	require.Equal(t, taskling.ProtocolVersion, b.count(t, `SELECT version FROM taskling.protocol`))
	require.NoError(t, holder.Complete(ctx))
	got := <-first
	require.NoError(t, got.err)
	require.Equal(t, holder.FencingToken()+1, got.exec.FencingToken())

	second := b.waitIn(ctx, waiter, 0)
	ticket, direct := firstTicket(t, b)
	require.True(t, direct)
	require.NoError(t, got.exec.Complete(ctx))
	next := <-second
	require.NoError(t, next.err)
	require.Equal(t, ticket, next.exec.ID(), "handed over directly")
	require.NoError(t, next.exec.Complete(ctx))
}

// A keyed waiter's ticket is direct too: the release grants it the slots of its cost under its
// key in its own transaction, and the waiter's execution is its ticket, with its key and cost.
func TestAReleasedSlotGoesStraightToTheKeyedWaiterFirstInLine(t *testing.T) {
	t.Parallel()
	for name, level := range map[string]taskling.Isolation{"read committed": taskling.IsolationReadCommitted,
		"serializable": taskling.IsolationSerializable} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			keyedHandoff(t, level)
		})
	}
}

func keyedHandoff(t *testing.T, level taskling.Isolation) {
	cfg := withKeys(3, 2, nil)
	cfg.Isolation = level
	b := setup(t, cfg)
	holder := b.start(t, &taskling.StartOptions{Key: "acme", Cost: 2})
	other := newClient(t, b.pool, &taskling.Config{HostName: "other-host", Isolation: level, Defaults: cfg.Defaults})
	waited := make(chan startResult, 1)
	go func() {
		e, err := other.StartExecution(b.ctx, b.app, b.task, &taskling.StartOptions{WaitForSlot: true, Key: "globex", Cost: 2})
		waited <- startResult{e, err, time.Now()}
	}()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.key_ticket WHERE key = 'globex' AND cost = 2 AND direct`) == 1
	}, 10*time.Second, 5*time.Millisecond, "a plain keyed waiter's ticket is direct")
	var ticket int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM taskling.key_ticket`).Scan(&ticket))

	require.NoError(t, holder.Complete(b.ctx))
	got := <-waited
	require.NoError(t, got.err)
	t.Cleanup(func() { _ = got.exec.Complete(context.Background()) })
	require.Equal(t, ticket, got.exec.ID(), "the slots were granted to the ticket, not by an acquire of its own")
	require.Equal(t, holder.FencingToken()+1, got.exec.FencingToken())
	require.Equal(t, "globex", got.exec.Key())
	require.Equal(t, 2, got.exec.Cost())
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.handoff`), "taken")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.task_execution WHERE id = $1 AND key = 'globex' AND cost = 2`, ticket))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM taskling.key_ticket`))
	require.ErrorIs(t, b.denied(t, &taskling.StartOptions{Key: "acme", Cost: 2}), taskling.ErrLimitReached, "2 of 3 are held")
	b.start(t, &taskling.StartOptions{Key: "acme"})
}

// A submission's start waits with a direct ticket too: the release grants it the slot, and the
// take starts the submission's attempt under the ticket's id.
func TestAReleasedSlotGoesStraightToTheSubmissionFirstInLine(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	holder := b.start(t, nil)
	id, err := b.client.Submit(b.ctx, b.app, b.task, &taskling.SubmitOptions{Key: "acme"})
	require.NoError(t, err)
	ran := make(chan *taskling.Execution, 1)
	b.work(t, newClient(t, b.pool, withLimit(1)), func(_ context.Context, e *taskling.Execution) error { ran <- e; return nil }, nil)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM taskling.key_ticket WHERE key = 'acme' AND direct`) == 1
	}, 10*time.Second, 5*time.Millisecond, "a submission's ticket is direct")
	var ticket int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM taskling.key_ticket`).Scan(&ticket))

	require.NoError(t, holder.Complete(b.ctx))
	e := <-ran
	require.Equal(t, ticket, e.ID(), "the slot was granted to the ticket")
	require.Equal(t, id, e.SubmissionID())
	require.Equal(t, 1, e.Attempt())
	require.Equal(t, "acme", e.Key())
	b.waitStatus(t, id, taskling.SubmissionCompleted)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.submission_attempt WHERE submission_id = $1 AND execution_id = $2`, id, ticket))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM taskling.task_execution`), "the holder's and the ticket's: no other")
}

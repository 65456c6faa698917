package taskling_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

func TestIdempotentStartRefusesDuplicateOfRunningOrSucceeded(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(-1))
	opts := &taskling.StartOptions{ReferenceValue: "2026-11-21.csv", Idempotent: true}
	first := b.start(t, opts)
	require.ErrorIs(t, b.denied(t, opts), taskling.ErrDuplicateReference, "while the first runs")
	require.NoError(t, first.Complete(b.ctx))
	require.ErrorIs(t, b.denied(t, opts), taskling.ErrDuplicateReference, "after it completed")

	failedOpts := &taskling.StartOptions{ReferenceValue: "bad.csv", Idempotent: true}
	err := b.client.Run(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { return errors.New("boom") }, failedOpts)
	require.EqualError(t, err, "boom")
	b.start(t, failedOpts) // allowed again after a failed one

	deadOpts := &taskling.StartOptions{ReferenceValue: "dead.csv", Idempotent: true}
	b.startDead(t, withLimit(-1), deadOpts)
	b.start(t, deadOpts) // allowed again after a dead one
}

func TestLastExecutionsReportsEveryStatusInBothDeathModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []taskling.DeathMode{taskling.DeathModeKeepAlive, taskling.DeathModeOverride} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s := fast
			s.ConcurrencyLimit = 2
			s.DeathMode, s.OverrideThreshold = mode, threshold
			b := setup(t, &taskling.Config{Defaults: s})

			completed := b.start(t, &taskling.StartOptions{ReferenceValue: "c", Header: map[string]int{"n": 1}})
			require.NoError(t, completed.SetProgress(b.ctx, 7, 10))
			require.NoError(t, completed.Complete(b.ctx))
			failed := b.start(t, nil)
			require.NoError(t, failed.RecordError(b.ctx, "row 17 bad", true))
			require.NoError(t, failed.Complete(b.ctx))
			dead := b.startDead(t, &taskling.Config{Defaults: s}, nil)
			running := b.start(t, nil)
			reclaimer := b.start(t, nil) // takes the dead execution's slot
			require.ErrorIs(t, b.denied(t, nil), taskling.ErrLimitReached)

			infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 10)
			require.NoError(t, err)
			require.Len(t, infos, 6)
			require.Equal(t, taskling.StatusBlocked, infos[0].Status, "newest first")
			require.Equal(t, taskling.StatusInProgress, infoByID(t, infos, running.ID()).Status)
			require.Equal(t, taskling.StatusInProgress, infoByID(t, infos, reclaimer.ID()).Status)
			require.Equal(t, taskling.StatusDead, infoByID(t, infos, dead.ID()).Status)
			require.Equal(t, taskling.StatusFailed, infoByID(t, infos, failed.ID()).Status)
			c := infoByID(t, infos, completed.ID())
			require.Equal(t, taskling.StatusCompleted, c.Status)
			require.Equal(t, "c", c.ReferenceValue)
			require.Equal(t, int64(7), c.ItemsDone)
			require.Equal(t, int64(10), c.ItemsTotal)
			require.JSONEq(t, `{"n":1}`, string(c.Header))
			require.Equal(t, completed.FencingToken(), c.FencingToken)
			require.Equal(t, "test-host", c.Host)
			require.False(t, c.CompletedAt.IsZero())
		})
	}
}

func TestRunMarksPanicAsFailedAndReturnsPanicError(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	err := b.client.Run(b.ctx, b.app, b.task, func(context.Context, *taskling.Execution) error { panic("kaboom") }, nil)
	var pe *taskling.PanicError
	require.ErrorAs(t, err, &pe)
	infos, err := b.client.LastExecutions(b.ctx, b.app, b.task, 1)
	require.NoError(t, err)
	require.Equal(t, taskling.StatusFailed, infos[0].Status)
	b.start(t, nil) // the slot was returned
}

func TestHeaderRoundTrips(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	type hdr struct{ File string }
	e := b.start(t, &taskling.StartOptions{Header: hdr{"x.csv"}})
	var got hdr
	require.NoError(t, e.Header(&got))
	require.Equal(t, "x.csv", got.File)
	require.NoError(t, e.Checkpoint(b.ctx, "loaded\x00 rows"))
	require.NoError(t, e.Complete(b.ctx))
	require.ErrorIs(t, e.Checkpoint(b.ctx, "late"), taskling.ErrExecutionCompleted)
	require.Equal(t, []taskling.EventType{taskling.EventStart, taskling.EventCheckpoint, taskling.EventEnd}, eventTypes(t, b, e.ID()))
}

// TestExecutionPagesFollowStartOrderAcrossHosts: pages of executions follow their start times,
// newest first, also when two hosts' ids (reserved ahead by each process) interleave out of that
// order; a page whose anchor cleanup deleted meanwhile is empty, as the godoc says.
func TestExecutionPagesFollowStartOrderAcrossHosts(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	other := newClient(t, b.pool, withLimit(1))
	for i := range 8 {
		c := []*taskling.Client{b.client, other}[i%2]
		e, err := c.StartExecution(b.ctx, b.app, b.task, nil)
		require.NoError(t, err)
		require.NoError(t, e.Complete(b.ctx))
	}
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM taskling.task_execution ORDER BY started_at DESC, id DESC`)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	var got []int64
	var before int64
	for {
		page, err := b.client.Executions(b.ctx, b.app, b.task, &taskling.ExecutionFilter{Limit: 3, Before: before})
		require.NoError(t, err)
		for _, e := range page.Executions {
			got = append(got, e.ID)
		}
		if page.NextBefore == 0 {
			break
		}
		before = page.NextBefore
	}
	require.Equal(t, want, got)
	_, err = b.pool.Exec(b.ctx, `DELETE FROM taskling.task_execution WHERE id = $1`, want[2])
	require.NoError(t, err)
	page, err := b.client.Executions(b.ctx, b.app, b.task, &taskling.ExecutionFilter{Limit: 3, Before: want[2]})
	require.NoError(t, err)
	require.Empty(t, page.Executions)
}

// TestCloseRefusesNewCallsButEndsNoExecution is the README's promise: after client.Close a start
// returns ErrClientClosed, and an execution started before it is not ended (it keeps its slot).
func TestCloseRefusesNewCallsButEndsNoExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	c := newClient(t, b.pool, withLimit(1))
	running, err := c.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	c.Close()
	_, err = c.StartExecution(b.ctx, b.app, b.task, nil)
	require.ErrorIs(t, err, taskling.ErrClientClosed)
	last, err := b.client.LastExecutions(b.ctx, b.app, b.task, 1)
	require.NoError(t, err)
	require.Len(t, last, 1)
	require.Equal(t, running.ID(), last[0].ID)
	require.Equal(t, taskling.StatusInProgress, last[0].Status)
	_, err = b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached, "its slot is still held")
}

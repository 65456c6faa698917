package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestSettlePlanUpgradeSettlesAttemptsStartedBefore: 0020 (the settlement as PL/pgSQL, which
// keeps its plan: as a SQL function it was planned at every ending, about a millisecond each) on
// a database of 0019 with two submissions whose attempts run: the one that completes is
// completed, the one whose attempt fails goes back to waiting with its error, as before.
func TestSettlePlanUpgradeSettlesAttemptsStartedBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 19))

	old := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, steady(2)), app: "app", task: "task"}
	link := func(sub, exec int64) {
		old.exec(t, `
WITH s AS (UPDATE taskling.submission SET status = 2, attempts = 1, execution_id = $2 WHERE id = $1 RETURNING id)
INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id) SELECT id, 1, $2 FROM s`, sub, exec)
	}
	completes, err := old.client.Submit(ctx, old.app, old.task, &taskling.SubmitOptions{ReferenceValue: "completes"})
	require.NoError(t, err)
	fails, err := old.client.Submit(ctx, old.app, old.task, &taskling.SubmitOptions{ReferenceValue: "fails", MaxAttempts: 3})
	require.NoError(t, err)
	first, second := old.start(t, nil), old.start(t, nil)
	link(completes, first.ID())
	link(fails, second.ID())

	require.NoError(t, migrations.Up(ctx, pool))
	require.Equal(t, 1, old.count(t, `SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.proname = 'settle_attempts' AND l.lanname = 'plpgsql'`), "a PL/pgSQL function keeps its plan")

	require.NoError(t, first.Complete(ctx))
	require.NoError(t, second.RecordError(ctx, "boom", true))
	require.NoError(t, second.Complete(ctx))
	s, err := old.client.Submission(ctx, completes)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCompleted, s.Status)
	require.NotNil(t, s.FinishedAt)
	s, err = old.client.Submission(ctx, fails)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionWaiting, s.Status, "one attempt of three spent")
	require.Nil(t, s.FinishedAt)
	require.Contains(t, s.LastError, "boom")
}

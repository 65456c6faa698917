package taskling_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// TestNamedValuesUpgradeSettlesAttemptsStartedBefore: 0018 (named codes, the shared rules as
// functions, the settlement in one function) on a database of the version before, with a holder
// running a submission's attempt, one completed execution and a failed one: the rows read as
// they did (statuses), and the end of the attempt started before the upgrade settles its
// submission through the new trigger body.
func TestNamedValuesUpgradeSettlesAttemptsStartedBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 17))

	old := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, steady(2)), app: "app", task: "task"}
	done := old.start(t, nil)
	require.NoError(t, done.Complete(ctx))
	failed := old.start(t, nil)
	old.exec(t, `UPDATE taskling.task_execution SET failed = true WHERE id = $1`, failed.ID())
	require.NoError(t, failed.Complete(ctx))
	sub, err := old.client.Submit(ctx, old.app, old.task, &taskling.SubmitOptions{ReferenceValue: "r-1"})
	require.NoError(t, err)
	holder := old.start(t, nil)
	// Its attempt, as the link of the version before wrote it.
	old.exec(t, `
WITH s AS (UPDATE taskling.submission SET status = 2, attempts = 1, execution_id = $2 WHERE id = $1 RETURNING id)
INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id) SELECT id, 1, $2 FROM s`, sub, holder.ID())

	require.NoError(t, migrations.Up(ctx, pool))

	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, steady(2)), app: "app", task: "task"}
	require.Equal(t, taskling.StatusCompleted, b.statusOf(t, done.ID()))
	require.Equal(t, taskling.StatusFailed, b.statusOf(t, failed.ID()))
	require.Equal(t, taskling.StatusInProgress, b.statusOf(t, holder.ID()))
	s, err := b.client.Submission(ctx, sub)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionInProgress, s.Status)

	require.NoError(t, holder.Complete(ctx))
	s, err = b.client.Submission(ctx, sub)
	require.NoError(t, err)
	require.Equal(t, taskling.SubmissionCompleted, s.Status, "settled by the trigger's new body")
	require.NotNil(t, s.FinishedAt)
}

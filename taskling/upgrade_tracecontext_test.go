package taskling_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// oldInsertSubmissionSQL is how a binary of migration 0020 inserts a submission: it names no
// trace context column.
const oldInsertSubmissionSQL = `
INSERT INTO taskling.submission (task_id, priority, reference_value, header, max_attempts)
SELECT id, 0, $3, '{"n": 1}'::jsonb, 3 FROM taskling.task_definition WHERE application_name = $1 AND task_name = $2
RETURNING id`

// TestTraceContextUpgradeKeepsSubmissionsAndOlderInserts: 0021 (trace context columns, the
// submission tally) on a database of 0020 with submissions, one completed and one waiting: they
// read back with no trace context and are counted by status (the tally starts from them), the
// waiting one runs, an insert as a binary of 0020 writes it still works and is counted, and a new
// Submit stores a trace context.
func TestTraceContextUpgradeKeepsSubmissionsAndOlderInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 20))
	old := newClient(t, pool, noAutoCleanup(withLimit(1)))
	require.NoError(t, old.Run(ctx, "app", "jobs", func(context.Context, *taskling.Execution) error { return nil }, nil)) // the task's row
	var done, waiting int64
	require.NoError(t, pool.QueryRow(ctx, oldInsertSubmissionSQL, "app", "jobs", "done").Scan(&done))
	_, err := pool.Exec(ctx, `UPDATE taskling.submission SET status = 3, attempts = 1, finished_at = now() WHERE id = $1`, done)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, oldInsertSubmissionSQL, "app", "jobs", "waiting").Scan(&waiting))

	require.NoError(t, migrations.Up(ctx, pool))
	b := &testBundle{ctx: ctx, pool: pool, client: newClient(t, pool, noAutoCleanup(withLimit(1))), app: "app", task: "jobs"}
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'submission_tally_%'`))
	for _, id := range []int64{done, waiting} {
		sub, err := b.client.Submission(ctx, id)
		require.NoError(t, err)
		require.True(t, sub.Trace.IsZero(), "submission %d has no trace context", id)
	}
	counts, err := b.client.SubmissionCounts(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []taskling.SubmissionCount{
		{Application: "app", Task: "jobs", Status: taskling.SubmissionWaiting, Submissions: 1},
		{Application: "app", Task: "jobs", Status: taskling.SubmissionCompleted, Submissions: 1},
	}, counts)

	var olderAfter int64
	require.NoError(t, pool.QueryRow(ctx, oldInsertSubmissionSQL, "app", "jobs", "older binary").Scan(&olderAfter))
	tc := taskling.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	traced, err := b.client.Submit(ctx, "app", "jobs", &taskling.SubmitOptions{TraceContext: tc})
	require.NoError(t, err)

	wctx, stop := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() {
		worked <- b.client.Work(wctx, "app", "jobs", func(context.Context, *taskling.Execution) error { return nil }, nil)
	}()
	for _, id := range []int64{waiting, olderAfter, traced} {
		require.Eventually(t, func() bool {
			sub, err := b.client.Submission(ctx, id)
			return err == nil && sub.Status == taskling.SubmissionCompleted
		}, 20*time.Second, 10*time.Millisecond, "submission %d completes", id)
	}
	stop()
	require.NoError(t, <-worked)
	sub, err := b.client.Submission(ctx, traced)
	require.NoError(t, err)
	require.Equal(t, tc, sub.Trace)
	counts, err = b.client.SubmissionCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, []taskling.SubmissionCount{{Application: "app", Task: "jobs", Status: taskling.SubmissionCompleted, Submissions: 4}}, counts)
}

package scale_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/scale"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// TestShortProfile runs `make scale` small (20 000 executions over 50 tasks, a few seconds): the
// cleanup must delete exactly the executions past retention, as computed apart in SQL, and keep
// every protected one (each task's latest and latest scheduled, the unended, the live holders).
// The figures are printed, not asserted: timing here says little.
func TestShortProfile(t *testing.T) {
	_, url := pgtest.NewDB(t)
	o := scale.Options{
		Seed:      scale.SeedOptions{Tasks: 50, Executions: 20_000, Days: 60},
		LastCalls: 100, LastN: 20, APICalls: 20,
		AcquireTasks: 2, PerTask: 2, Baseline: time.Second,
		PauseEvery: 200 * time.Millisecond, Pause: 200 * time.Millisecond,
		ReadsAfter:  true,
		Submissions: 5000, Scrapes: 3,
	}
	r, err := scale.Run(context.Background(), url, o, t.Logf)
	require.NoError(t, err)
	var out strings.Builder
	r.Print(&out)
	t.Log("\n" + out.String())
	require.NoError(t, r.Check.Err())

	e := r.Expected
	require.Positive(t, e.Completed)
	require.Positive(t, e.Failed)
	require.Positive(t, e.Blocked)
	require.Positive(t, e.Instants)
	require.Positive(t, e.ProtectedOld, "quiet tasks: their latest executions are past retention, and kept")
	require.Greater(t, e.Executions(), int64(o.Seed.Executions)/2, "the seeded history is mostly past retention")
	require.Equal(t, int64(o.Seed.Executions)-e.Executions(), e.Kept)
	require.Equal(t, r.Seeded.Events-e.Events, r.Check.EventsLeft, "the events of the deleted executions went with them")
	require.Zero(t, r.Denied)
	require.Zero(t, r.Skipped)
	require.Positive(t, r.Holders)
	require.NotEmpty(t, r.AcquireBefore)
	require.NotEmpty(t, r.AcquirePaused)
	require.NotEmpty(t, r.AcquireDuring)
	require.Len(t, r.Scrape.Latencies, 3)
	require.GreaterOrEqual(t, r.Scrape.Submissions, int64(5000)*9/10, "a few land on no task (the skew's rounding): most do")
	require.Positive(t, r.Scrape.Series)
}

// TestVerifyCatchesAWrongCleanup: the check fails when a protected execution is deleted, when an
// execution past retention remains, and when the counts differ from what was deleted.
func TestVerifyCatchesAWrongCleanup(t *testing.T) {
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	_, err := scale.Seed(ctx, pool, scale.SeedOptions{Tasks: 5, Executions: 2000, Days: 60}, nil)
	require.NoError(t, err)
	e, err := scale.Expect(ctx, pool, 2000)
	require.NoError(t, err)
	var latest, doomed int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM taskling.task_execution ORDER BY started_at DESC, id DESC LIMIT 1`).Scan(&latest))
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(id) FROM public.scale_verdict WHERE doomed`).Scan(&doomed))
	// A "cleanup" that deletes every doomed execution but one, and the newest execution.
	_, err = pool.Exec(ctx, `DELETE FROM taskling.task_execution e USING public.scale_verdict v
WHERE v.id = e.id AND ((v.doomed AND v.id <> $1) OR v.id = $2)`, doomed, latest)
	require.NoError(t, err)
	claimed := taskling.CleanupCounts{Completed: e.Completed, Failed: e.Failed, Blocked: e.Blocked + 1, Instants: e.Instants}
	c, err := scale.Verify(ctx, pool, e, claimed)
	require.NoError(t, err)
	require.False(t, c.OK())
	require.Equal(t, int64(1), c.KeptGone)
	require.Equal(t, int64(1), c.DoomedLeft)
	require.Len(t, c.Problems, 3, "%v", c.Problems)
	require.Contains(t, c.Problems[2], "blocked")

	c, err = scale.Verify(ctx, pool, e, taskling.CleanupCounts{})
	require.NoError(t, err)
	require.Contains(t, c.Problems, "the cleanup deleted nothing")
}

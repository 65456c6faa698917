package taskling_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// counted is what SubmissionCounts says, and what a count of the table says, by "task status".
func counted(t *testing.T, b *testBundle) (tally, table map[string]int64) {
	t.Helper()
	counts, err := b.client.SubmissionCounts(b.ctx)
	require.NoError(t, err)
	tally = map[string]int64{}
	for _, c := range counts {
		tally[c.Task+" "+string(c.Status)] = c.Submissions
	}
	rows, err := b.pool.Query(b.ctx, `SELECT d.task_name || ' ' || CASE s.status WHEN 1 THEN 'waiting' WHEN 2 THEN 'in_progress'
    WHEN 3 THEN 'completed' WHEN 4 THEN 'dead' ELSE 'cancelled' END, count(*)
FROM taskling.submission s JOIN taskling.task_definition d ON d.id = s.task_id GROUP BY 1`)
	require.NoError(t, err)
	table = map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		require.NoError(t, rows.Scan(&k, &n))
		table[k] = n
	}
	require.NoError(t, rows.Err())
	return tally, table
}

// tallyMismatchSQL compares, in one snapshot, the tally's sums with a count of the table: the
// (task, status) pairs on which they differ.
const tallyMismatchSQL = `
SELECT count(*) FROM (SELECT task_id, status, sum(n) AS n FROM taskling.submission_tally GROUP BY 1, 2 HAVING sum(n) <> 0) a
FULL JOIN (SELECT task_id, status, count(*) AS n FROM taskling.submission GROUP BY 1, 2) c USING (task_id, status)
WHERE a.n IS DISTINCT FROM c.n`

// TestSubmissionCountsFollowEveryChange: the tally behind SubmissionCounts (migration 0021)
// agrees with a count of the table through concurrent submits (duplicates and a rolled-back
// SubmitTx among them), attempts that complete, fail for good or run, cancels, compactions at any
// point, and a cleanup that deletes finished submissions; at both isolation levels (the
// triggers run in the token transactions that start and end attempts).
func TestSubmissionCountsFollowEveryChange(t *testing.T) {
	t.Parallel()
	for name, iso := range map[string]taskling.Isolation{"read committed": taskling.IsolationReadCommitted,
		"serializable": taskling.IsolationSerializable} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := noAutoCleanup(withLimit(2))
			cfg.Isolation = iso
			submissionCountsFollow(t, setup(t, cfg), iso)
		})
	}
}

func submissionCountsFollow(t *testing.T, b *testBundle, iso taskling.Isolation) {
	check := func(when string) {
		t.Helper()
		tally, table := counted(t, b)
		require.Equal(t, table, tally, when)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				_, err := b.client.Submit(b.ctx, b.app, "jobs", &taskling.SubmitOptions{ReferenceValue: fmt.Sprintf("r-%d", (g*10+i)%25),
					Header: map[string]bool{"fail": i%3 == 0}, MaxAttempts: 1})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.client.SubmitTx(b.ctx, tx, b.app, "jobs", nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))
	check("after the submits")
	tally, _ := counted(t, b)
	require.Equal(t, map[string]int64{"jobs waiting": 25}, tally, "25 references, the duplicates stored nothing, the rollback nothing")
	_, err = b.client.CompactSubmissionTallyForTest(b.ctx)
	require.NoError(t, err)
	check("after a compaction")

	waiting, err := b.client.Submissions(b.ctx, b.app, "jobs", &taskling.SubmissionFilter{Status: taskling.SubmissionWaiting, Limit: 3})
	require.NoError(t, err)
	for _, s := range waiting {
		_, err := b.client.CancelSubmission(b.ctx, s.ID, "")
		require.NoError(t, err)
	}
	hold := make(chan struct{})
	ctx, stop := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.client.Work(ctx, b.app, "jobs", func(ctx context.Context, e *taskling.Execution) error {
			var h struct{ Fail bool }
			_ = e.Header(&h)
			if h.Fail {
				return errors.New("bad file")
			}
			if !h.Fail {
				select { // in progress until released
				case <-hold:
				case <-ctx.Done():
				}
			}
			return nil
		}, &taskling.WorkOptions{Workers: 2})
	}()
	require.Eventually(t, func() bool {
		tally, _ := counted(t, b)
		return tally["jobs in_progress"] == 2 // both slots held by attempts that wait for hold
	}, 20*time.Second, 20*time.Millisecond)
	require.Zero(t, b.count(t, tallyMismatchSQL), "with attempts in progress")
	_, err = b.client.CompactSubmissionTallyForTest(b.ctx)
	require.NoError(t, err)
	require.Zero(t, b.count(t, tallyMismatchSQL), "after a compaction with attempts in progress")
	close(hold)
	// While the attempts run and settle, compactions run alongside, and every snapshot agrees.
	require.Eventually(t, func() bool {
		_, err := b.client.CompactSubmissionTallyForTest(b.ctx)
		require.NoError(t, err)
		require.Zero(t, b.count(t, tallyMismatchSQL), "while the attempts run")
		tally, _ := counted(t, b)
		return tally["jobs in_progress"] == 0 && tally["jobs waiting"] == 0
	}, 30*time.Second, 10*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	check("after the attempts")
	tally, _ = counted(t, b)
	require.Equal(t, int64(3), tally["jobs cancelled"])
	require.Positive(t, tally["jobs dead"])
	require.Positive(t, tally["jobs completed"])

	// Finished submissions without a reference go once past retention: here, at once.
	_, err = b.pool.Exec(b.ctx, `UPDATE taskling.submission SET reference_value = NULL, finished_at = finished_at - interval '100 days'`)
	require.NoError(t, err)
	cfg := noAutoCleanup(withLimit(2)) // a client that has not compacted in the last minute
	cfg.Isolation = iso
	cleaner := newClient(t, b.pool, cfg)
	_, err = cleaner.Cleanup(b.ctx, b.app, "jobs", nil)
	require.NoError(t, err)
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.submission_tally`), "the cleanup compacted the tally (its deletes' rows with the rest): nothing is left to count")
	check("after the cleanup")
	tally, _ = counted(t, b)
	require.Empty(t, tally, "every finished submission deleted")
}

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

// TestBlockRangesUpgradeContinuesFromTheBlocksOfBefore: 0024 (ranges cut by the database, the
// indexes of where blocks end) on a database of 0023 in use: a holder started before the upgrade,
// whose task has numeric and date blocks from before it, continues both after it from where they
// end, and completes. Before the migration, this binary's numeric take names it.
func TestBlockRangesUpgradeContinuesFromTheBlocksOfBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 23))
	const app, task = "app", "task"
	old := newClient(t, pool, withLimit(1))
	holder, err := old.StartExecution(ctx, app, task, nil)
	require.NoError(t, err)
	// The blocks as a release of 0023 took them (this binary cuts ranges with 0024's functions):
	// numeric [1, 10] completed and [11, 20] taken, date [1 Jan, 2 Jan) taken.
	_, err = pool.Exec(ctx, `
WITH e AS (SELECT id, task_id FROM taskling.task_execution WHERE id = $1),
n AS (
    INSERT INTO taskling.block (task_id, kind, execution_id, from_number, to_number, status)
    SELECT task_id, 1, id, f, f + 9, CASE WHEN f = 1 THEN 3 ELSE 1 END FROM e, unnest(ARRAY[1, 11]) AS f
    RETURNING id, execution_id, status
),
d AS (
    INSERT INTO taskling.block (task_id, kind, execution_id, from_date, to_date)
    SELECT task_id, 2, id, '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z' FROM e
    RETURNING id, execution_id, status
)
INSERT INTO taskling.block_attempt (block_id, attempt, execution_id, status)
SELECT id, 1, execution_id, status FROM n UNION ALL SELECT id, 1, execution_id, status FROM d`, holder.ID())
	require.NoError(t, err)

	_, err = holder.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 1000, MaxSize: 10}, &taskling.BlockOptions{MaxBlocks: 1})
	require.ErrorContains(t, err, "need migration 0024", "a numeric take before the migration names it")

	require.NoError(t, migrations.Up(ctx, pool))

	numbers, err := holder.NumericBlocks(ctx, taskling.NumericRange{From: 1, To: 1000, MaxSize: 10},
		&taskling.BlockOptions{MaxBlocks: 2, ContinueFromLast: true})
	require.NoError(t, err)
	require.Len(t, numbers, 2)
	require.Equal(t, [4]int64{21, 30, 31, 40}, [4]int64{numbers[0].From, numbers[0].To, numbers[1].From, numbers[1].To})
	jan := func(day int) time.Time { return time.Date(2026, 1, day, 0, 0, 0, 0, time.UTC) }
	dates, err := holder.DateBlocks(ctx, taskling.DateRange{From: jan(1), To: jan(4), MaxSpan: 24 * time.Hour},
		&taskling.BlockOptions{ContinueFromLast: true})
	require.NoError(t, err)
	require.Len(t, dates, 2)
	require.True(t, dates[0].FromTime.Equal(jan(2)) && dates[0].ToTime.Equal(jan(3)), "%v", dates[0])
	require.True(t, dates[1].FromTime.Equal(jan(3)) && dates[1].ToTime.Equal(jan(4)), "%v", dates[1])
	for _, b := range append(numbers, dates...) {
		require.NoError(t, b.Start(ctx))
		require.NoError(t, b.Complete(ctx, 0))
	}
	require.NoError(t, holder.Complete(ctx))
}

package taskling_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/taskling"
)

// The database cuts numeric and date ranges into blocks (migration 0024). These property tests
// hold its cut to the one the client made before, kept here as the model: a range from its From,
// or from just after the task's last block when that ends at or after From, cut into blocks of at
// most MaxSize numbers (MaxSpan), at most room of them (negative: no cap).

func modelNumeric(last *int64, from, to, size int64, room int) [][2]int64 {
	if last != nil && *last >= from {
		if *last == math.MaxInt64 {
			return nil
		}
		from = *last + 1
	}
	var out [][2]int64
	for f := from; f <= to && room != 0; room-- {
		t := to
		if to-f >= size {
			t = f + size - 1
		}
		out = append(out, [2]int64{f, t})
		if t == to {
			break
		}
		f = t + 1
	}
	return out
}

func modelDates(last *time.Time, from, to time.Time, span time.Duration, room int) [][2]time.Time {
	if last != nil && last.After(from) {
		from = *last
	}
	var out [][2]time.Time
	for f := from; f.Before(to) && room != 0; room-- {
		t := f.Add(span)
		if t.After(to) {
			t = to
		}
		out = append(out, [2]time.Time{f, t})
		f = t
	}
	return out
}

// TestTheDatabaseCutsNumericRangesAsTheModel draws ranges near zero and near both ends of int64,
// sizes from 1 to MaxInt64/2, a last block's end before, inside and after the range (MaxInt64
// too), and room capped or not.
func TestTheDatabaseCutsNumericRangesAsTheModel(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	rapid.Check(t, func(t *rapid.T) {
		base := rapid.SampledFrom([]int64{0, -1000, math.MinInt64 / 2, math.MaxInt64 - 1000}).Draw(t, "base")
		from := base + rapid.Int64Range(0, 500).Draw(t, "from")
		to := from + rapid.Int64Range(0, headroom(from, 500)).Draw(t, "length")
		size := rapid.SampledFrom([]int64{1, 2, 3, 7, 10, 100, 1000, math.MaxInt64 / 2}).Draw(t, "size")
		room := rapid.IntRange(-1, 20).Draw(t, "room")
		var last *int64
		switch rapid.IntRange(0, 3).Draw(t, "last kind") {
		case 1:
			l := from + rapid.Int64Range(-10, headroom(from, 600)).Draw(t, "last")
			last = &l
		case 2:
			l := int64(math.MaxInt64)
			last = &l
		}
		want := modelNumeric(last, from, to, size, room)
		if room < 0 && len(want) > 600 { // the model without a cap: a call is capped by MaxNewBlocks
			t.Skip("too many blocks")
		}
		got := sqlNumeric(t, ctx, pool, last, from, to, size, room)
		require.Equal(t, want, got, "last %v from %d to %d size %d room %d", last, from, to, size, room)
	})
}

// headroom is at most n, and no more than from can grow by without overflowing.
func headroom(from, n int64) int64 {
	if from <= 0 {
		return n
	}
	return min(n, math.MaxInt64-from)
}

func sqlNumeric(t *rapid.T, ctx context.Context, pool *pgxpool.Pool, last *int64, from, to, size int64, room int) [][2]int64 {
	rows, err := pool.Query(ctx, `SELECT from_number, to_number FROM taskling.numeric_block_ranges($1, $2, $3, $4, $5)`,
		last, from, to, size, int32(room))
	require.NoError(t, err)
	defer rows.Close()
	var got [][2]int64
	for rows.Next() {
		var r [2]int64
		require.NoError(t, rows.Scan(&r[0], &r[1]))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	return got
}

// TestTheDatabaseCutsDateRangesAsTheModel draws microsecond ranges around today and across
// centuries, spans from 1 µs to years (never a whole number of days only), a last block's end
// before, inside and after the range, and room capped or not.
func TestTheDatabaseCutsDateRangesAsTheModel(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	rapid.Check(t, func(t *rapid.T) {
		base := rapid.SampledFrom([]time.Time{time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2600, 12, 31, 23, 0, 0, 0, time.UTC)}).Draw(t, "base")
		unit := rapid.SampledFrom([]time.Duration{time.Microsecond, time.Second, time.Hour, 24 * time.Hour, 24 * 365 * time.Hour}).Draw(t, "unit")
		from := base.Add(time.Duration(rapid.Int64Range(-50, 50).Draw(t, "from")) * unit)
		to := from.Add(time.Duration(rapid.Int64Range(1, 300).Draw(t, "length")) * unit)
		span := time.Duration(rapid.Int64Range(1, 120).Draw(t, "span")) * unit / 7
		span = max(span.Truncate(time.Microsecond), time.Microsecond)
		room := rapid.IntRange(-1, 20).Draw(t, "room")
		var last *time.Time
		if rapid.Bool().Draw(t, "has last") {
			l := from.Add(time.Duration(rapid.Int64Range(-10, 400).Draw(t, "last")) * unit / 3).Truncate(time.Microsecond)
			last = &l
		}
		want := modelDates(last, from, to, span, room)
		if room < 0 && len(want) > 600 {
			t.Skip("too many blocks")
		}
		rows, err := pool.Query(ctx, `SELECT from_date, to_date FROM taskling.date_block_ranges($1, $2, $3, $4, $5)`,
			last, from, to, span, int32(room))
		require.NoError(t, err)
		defer rows.Close()
		var got [][2]time.Time
		for rows.Next() {
			var r [2]time.Time
			require.NoError(t, rows.Scan(&r[0], &r[1]))
			got = append(got, r)
		}
		require.NoError(t, rows.Err())
		require.Len(t, got, len(want), "last %v from %s to %s span %s room %d", last, from, to, span, room)
		for i := range want {
			require.True(t, want[i][0].Equal(got[i][0]) && want[i][1].Equal(got[i][1]),
				"block %d: want %v, got %v (last %v from %s to %s span %s room %d)", i, want[i], got[i], last, from, to, span, room)
		}
	})
}

// TestContinuedRangesReadWhereTheTasksBlocksEndByIndex: a task that kept 20 000 numeric blocks
// continues from the last one, and the statement finds where they end by
// block_numeric_end_idx (before migration 0024 it scanned all of them, under the task's block
// lock), and right.
func TestContinuedRangesReadWhereTheTasksBlocksEndByIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Complete(b.ctx)) }()
	var task int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM taskling.task_definition WHERE task_name = $1`, b.task).Scan(&task))
	_, err = b.pool.Exec(b.ctx, `INSERT INTO taskling.block (task_id, kind, execution_id, from_number, to_number, status)
        SELECT $1, 1, 0, g * 10 + 1, g * 10 + 10, 3 FROM generate_series(0, 19999) g`, task)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE taskling.block`)
	require.NoError(t, err)
	scans := func() int64 {
		var n int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT idx_scan FROM pg_stat_user_indexes
            WHERE schemaname = 'taskling' AND indexrelname = 'block_numeric_end_idx'`).Scan(&n))
		return n
	}
	before := scans()

	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 1 << 40, MaxSize: 10},
		&taskling.BlockOptions{MaxBlocks: 2, ContinueFromLast: true})
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	require.Equal(t, [2]int64{200001, 200010}, [2]int64{blocks[0].From, blocks[0].To})
	require.Equal(t, [2]int64{200011, 200020}, [2]int64{blocks[1].From, blocks[1].To})
	// A backend reports its index scans within a second or so of its transaction's end.
	require.Eventually(t, func() bool { return scans() > before }, 10*time.Second, 50*time.Millisecond,
		"the take did not read the end of the task's blocks by block_numeric_end_idx")
}

// TestTakesUseGenericPlans: the forced blocks' claim and the ranges' insert of a take use their
// generic plans. PostgreSQL otherwise keeps planning them for each call's parameters (it judged
// those custom plans cheaper), which cost about as much as running them.
func TestTakesUseGenericPlans(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e, err := b.client.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	for range 8 {
		blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 1 << 40, MaxSize: 10},
			&taskling.BlockOptions{MaxBlocks: 2, ContinueFromLast: true})
		require.NoError(t, err)
		require.Len(t, blocks, 2)
	}
	require.NoError(t, e.Complete(b.ctx))
	// Plans are counted per connection: those of a connection busy with the client's own work
	// (a heartbeat) are counted once it is idle again.
	plans := func() (generic, custom int64) {
		for _, conn := range b.pool.AcquireAllIdle(b.ctx) {
			var g, c int64
			err := conn.QueryRow(b.ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
                FROM pg_prepared_statements WHERE statement LIKE '%INSERT INTO taskling.block (task_id, kind, execution_id, from_number%'
                   OR statement LIKE '%taskling.forced_block f WHERE f.task_id = $1 AND f.taken_at IS NULL%'`).Scan(&g, &c)
			conn.Release()
			require.NoError(t, err)
			generic, custom = generic+g, custom+c
		}
		return generic, custom
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		generic, custom := plans()
		require.Zero(t, custom, "custom plans of the take's statements")
		if generic >= 16 { // the take's two statements, 8 takes
			return
		}
		require.True(t, time.Now().Before(deadline), "%d generic plans of the take's statements", generic)
		time.Sleep(50 * time.Millisecond)
	}
}

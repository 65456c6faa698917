package taskling_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

var (
	hour        = &taskling.RetryPolicy{Within: time.Hour, RetryLimit: 3}
	onlyFailed  = &taskling.BlockOptions{OnlyOld: true, ReprocessFailed: hour}
	onlyDead    = &taskling.BlockOptions{OnlyOld: true, ReprocessDead: &taskling.RetryPolicy{Within: 24 * time.Hour, RetryLimit: 3}}
	noBlocksNew = taskling.NumericRange{From: 1, To: 1, MaxSize: 1}
)

func ranges(bs []*taskling.Block) [][2]int64 {
	out := make([][2]int64, len(bs))
	for i, b := range bs {
		out[i] = [2]int64{b.From, b.To}
	}
	return out
}

// progress reads an execution's items done and total.
func (b *testBundle) progress(t *testing.T, id int64) (done, total int64) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(items_done, 0), coalesce(items_total, 0) FROM taskling.task_execution WHERE id = $1`, id).
		Scan(&done, &total))
	return done, total
}

func TestNumericBlocksSplitTheRangeAndProgressFollowsThem(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	e := b.start(t, nil)
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 2500, MaxSize: 1000}, nil)
	require.NoError(t, err)
	require.Equal(t, [][2]int64{{1, 1000}, {1001, 2000}, {2001, 2500}}, ranges(blocks))
	for _, bl := range blocks {
		require.Equal(t, 1, bl.Attempt)
		require.Equal(t, taskling.KindNumericRange, bl.Kind)
	}
	done, total := b.progress(t, e.ID())
	require.Equal(t, [2]int64{0, 2500}, [2]int64{done, total})

	require.NoError(t, blocks[0].Start(b.ctx))
	require.NoError(t, blocks[0].Complete(b.ctx, 990))
	require.NoError(t, blocks[1].Fail(b.ctx, "disk full"))
	done, _ = b.progress(t, e.ID())
	require.EqualValues(t, 1000, done)

	infos, err := b.client.ExecutionBlocks(b.ctx, e.ID())
	require.NoError(t, err)
	require.Equal(t, []taskling.BlockStatus{taskling.BlockCompleted, taskling.BlockFailed, taskling.BlockNotStarted},
		[]taskling.BlockStatus{infos[0].Status, infos[1].Status, infos[2].Status})
	require.Equal(t, "disk full", infos[1].Message)
	attempts, err := b.client.BlockAttempts(b.ctx, blocks[0].ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.EqualValues(t, 990, *attempts[0].ItemsDone)
	require.NotNil(t, attempts[0].StartedAt)
	require.NotNil(t, attempts[0].EndedAt)

	// An ended attempt takes no more writes (Taskling let a list block complete twice).
	require.ErrorIs(t, blocks[0].Complete(b.ctx, 1), taskling.ErrBlockLost)
}

func TestDateBlocksAreHalfOpenAndCoverTheRange(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	blocks, err := e.DateBlocks(b.ctx, taskling.DateRange{From: from, To: from.Add(150 * time.Minute), MaxSpan: time.Hour}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.True(t, blocks[0].FromTime.Equal(from))
	for i := 1; i < len(blocks); i++ {
		require.True(t, blocks[i].FromTime.Equal(blocks[i-1].ToTime), "block %d starts where %d ends", i, i-1)
	}
	require.True(t, blocks[2].ToTime.Equal(from.Add(150*time.Minute)))
}

func TestObjectBlocksHoldOneValueEach(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	type job struct{ Name string }
	blocks, err := e.ObjectBlocks(b.ctx, []any{job{"a"}, job{"b"}}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	var got job
	require.NoError(t, blocks[1].Decode(&got))
	require.Equal(t, "b", got.Name)
}

// failOne makes one numeric block [from, to] in its own execution and fails it.
func (b *testBundle) failOne(t *testing.T, from, to int64) int64 {
	t.Helper()
	e := b.start(t, nil)
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: from, To: to, MaxSize: to - from + 1}, nil)
	require.NoError(t, err)
	require.Len(t, blocks, 1)
	require.NoError(t, blocks[0].Fail(b.ctx, "boom"))
	require.NoError(t, e.Complete(b.ctx))
	return blocks[0].ID
}

func TestFailedBlocksAreReprocessedOnlyWhenAskedAndWithinTheRetryLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	id := b.failOne(t, 1, 10)

	e := b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{OnlyOld: true})
	require.NoError(t, err)
	require.Empty(t, got, "failed blocks are taken again only when asked")
	limit1 := &taskling.BlockOptions{OnlyOld: true, ReprocessFailed: &taskling.RetryPolicy{Within: time.Hour, RetryLimit: 1}}
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, limit1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].ID)
	require.Equal(t, 2, got[0].Attempt)
	require.Equal(t, [2]int64{1, 10}, [2]int64{got[0].From, got[0].To})
	require.NoError(t, got[0].Fail(b.ctx, "again"))
	require.NoError(t, e.Complete(b.ctx))

	// Retry limit 1: two attempts in all, so no third.
	e = b.start(t, nil)
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, limit1)
	require.NoError(t, err)
	require.Empty(t, got)
	atLimit, err := b.client.TaskBlocks(b.ctx, b.app, b.task, &taskling.TaskBlocksFilter{AtRetryLimit: true})
	require.NoError(t, err)
	require.Len(t, atLimit, 1)
	// A higher limit takes it again.
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, onlyFailed)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 3, got[0].Attempt)
}

func TestFailedBlocksOutsideTheDetectionRangeAreLeft(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	id := b.failOne(t, 1, 10)
	b.exec(t, `UPDATE taskling.task_execution SET started_at = started_at - interval '2 hours'
        WHERE id = (SELECT execution_id FROM taskling.block WHERE id = $1)`, id)
	e := b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{OnlyOld: true,
		ReprocessFailed: &taskling.RetryPolicy{Within: time.Hour, RetryLimit: 5}})
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{OnlyOld: true,
		ReprocessFailed: &taskling.RetryPolicy{Within: 3 * time.Hour, RetryLimit: 5}})
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestDeadBlocksAreReprocessedAndLiveOnesNever(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(3))
	other := newClient(t, b.pool, withLimit(3))
	owner, err := other.StartExecution(b.ctx, b.app, b.task, nil)
	require.NoError(t, err)
	blocks, err := owner.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 100, MaxSize: 100}, nil)
	require.NoError(t, err)
	require.NoError(t, blocks[0].Start(b.ctx))

	e := b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, onlyDead)
	require.NoError(t, err)
	require.Empty(t, got, "a started block of a running execution is live")

	// Its process stops and ages past the death threshold: the block is dead, and its owner's
	// context is cancelled.
	owner.StopHeartbeatForTest()
	b.exec(t, ageSQL, owner.ID(), time.Hour)
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, onlyDead)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Attempt)
	require.Eventually(t, func() bool { return leaseLost(owner) }, 5*time.Second, 10*time.Millisecond)
	// The dead owner's writes are refused.
	require.Error(t, blocks[0].Complete(b.ctx, 100))
	info, err := b.client.Block(b.ctx, got[0].ID)
	require.NoError(t, err)
	require.Equal(t, taskling.BlockNotStarted, info.Status)
	require.Equal(t, e.ID(), info.ExecutionID)
}

func TestABlockLeftUnfinishedByACompletedExecutionIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	first := b.start(t, nil)
	_, err := first.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, first.Complete(b.ctx))
	e := b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, onlyDead)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestForcedBlocksComeFirstOnceWithTheNextAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 20, MaxSize: 10}, nil)
	require.NoError(t, err)
	for _, bl := range blocks {
		require.NoError(t, bl.Complete(b.ctx, 10))
	}
	require.NoError(t, e.Complete(b.ctx))
	require.NoError(t, b.client.ForceBlock(b.ctx, blocks[1].ID, "ops"))
	require.NoError(t, b.client.ForceBlock(b.ctx, blocks[1].ID, "ops"), "forcing twice is one force")
	require.ErrorIs(t, b.client.ForceBlock(b.ctx, 1<<40, "ops"), taskling.ErrNotFound)

	e = b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 21, To: 30, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, blocks[1].ID, got[0].ID, "the forced block first")
	require.True(t, got[0].Forced)
	require.Equal(t, 2, got[0].Attempt, "one more attempt (Taskling added two)")
	require.Equal(t, [2]int64{21, 30}, [2]int64{got[1].From, got[1].To})
	require.NoError(t, e.Complete(b.ctx))

	e = b.start(t, nil)
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{OnlyOld: true})
	require.NoError(t, err)
	require.Empty(t, got, "a forced block is taken once")
}

func TestMaxBlocksCapsForcedDeadFailedAndNewTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	for i := range int64(3) {
		b.failOne(t, i*10+1, i*10+10)
	}
	e := b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 100, To: 200, MaxSize: 10},
		&taskling.BlockOptions{MaxBlocks: 4, ReprocessFailed: hour, ReprocessDead: hour})
	require.NoError(t, err)
	require.Equal(t, [][2]int64{{1, 10}, {11, 20}, {21, 30}, {100, 109}}, ranges(got), "old blocks first, oldest first, then new up to the cap")
	got, err = e.NumericBlocks(b.ctx, taskling.NumericRange{From: 100, To: 200, MaxSize: 10},
		&taskling.BlockOptions{MaxBlocks: 2, ContinueFromLast: true})
	require.NoError(t, err)
	require.Equal(t, [][2]int64{{110, 119}, {120, 129}}, ranges(got))
}

func TestContinueFromLastNeverCreatesARangeTwiceConcurrently(t *testing.T) {
	t.Parallel()
	const executions, each = 8, 5
	b := setup(t, withLimit(executions))
	var mu sync.Mutex
	var all [][2]int64
	var wg sync.WaitGroup
	for range executions {
		e := b.start(t, nil)
		wg.Go(func() {
			got, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 1_000_000, MaxSize: 100},
				&taskling.BlockOptions{MaxBlocks: each, ContinueFromLast: true})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			all = append(all, ranges(got)...)
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, all, executions*each)
	slices.SortFunc(all, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	for i, r := range all {
		require.Equal(t, [2]int64{int64(i)*100 + 1, int64(i)*100 + 100}, r, "contiguous, no overlap, none twice")
	}
}

func TestConcurrentExecutionsNeverTakeTheSameFailedBlock(t *testing.T) {
	t.Parallel()
	const blocks, executions = 40, 8
	b := setup(t, withLimit(executions))
	e := b.start(t, nil)
	made, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: blocks, MaxSize: 1}, nil)
	require.NoError(t, err)
	for _, bl := range made {
		require.NoError(t, bl.Fail(b.ctx, "x"))
	}
	require.NoError(t, e.Complete(b.ctx))

	taken := map[int64]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range executions {
		e := b.start(t, nil)
		wg.Go(func() {
			for {
				got, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{OnlyOld: true, MaxBlocks: 3, ReprocessFailed: hour})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, bl := range got {
					taken[bl.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, taken, blocks)
	for id, n := range taken {
		require.Equal(t, 1, n, "block %d taken %d times", id, n)
	}
}

func TestReprocessByReferenceTakesTheRightBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, &taskling.StartOptions{ReferenceValue: "batch-1"})
	made, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 30, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, made[0].Complete(b.ctx, 10))
	require.NoError(t, made[1].Fail(b.ctx, "x"))
	require.NoError(t, made[2].Start(b.ctx)) // left started: dead once e ends
	require.NoError(t, e.Complete(b.ctx))

	// Taskling's range query picked NotDefined, NotStarted and Completed blocks; the failed and
	// unfinished ones are what "not completed" means.
	e = b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{Reprocess: &taskling.ReprocessReference{ReferenceValue: "batch-1"}})
	require.NoError(t, err)
	require.Equal(t, []int64{made[1].ID, made[2].ID}, []int64{got[0].ID, got[1].ID})
	require.Len(t, got, 2)
	for _, bl := range got {
		require.NoError(t, bl.Complete(b.ctx, 10))
	}
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{Reprocess: &taskling.ReprocessReference{ReferenceValue: "batch-1", All: true}})
	require.NoError(t, err)
	require.Len(t, got, 3)
	got, err = e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{Reprocess: &taskling.ReprocessReference{ReferenceValue: "other"}})
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestLastBlockIsOfTheKindAskedFor(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	_, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 20, MaxSize: 10}, nil)
	require.NoError(t, err)
	_, err = e.ObjectBlocks(b.ctx, []any{"x"}, nil)
	require.NoError(t, err)
	last, err := e.LastBlock(b.ctx, taskling.KindNumericRange, taskling.LastCreated)
	require.NoError(t, err)
	require.Equal(t, taskling.KindNumericRange, last.Kind, "Taskling's last-block queries ignored the kind")
	require.EqualValues(t, 20, last.To)
	last, err = e.LastBlock(b.ctx, taskling.KindDateRange, taskling.MaxRangeEnd)
	require.NoError(t, err)
	require.Nil(t, last)
}

func TestBlockBadInputIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	now := time.Now()
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"inverted range", "NumericRange.From", func() error {
			_, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 10, To: 1, MaxSize: 5}, nil)
			return err
		}},
		{"zero size", "NumericRange.MaxSize", func() error {
			_, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10}, nil)
			return err
		}},
		{"empty date range", "DateRange.From", func() error {
			_, err := e.DateBlocks(b.ctx, taskling.DateRange{From: now, To: now, MaxSpan: time.Hour}, nil)
			return err
		}},
		{"zero span", "DateRange.MaxSpan", func() error {
			_, err := e.DateBlocks(b.ctx, taskling.DateRange{From: now, To: now.Add(time.Hour)}, nil)
			return err
		}},
		{"negative cap", "BlockOptions.MaxBlocks", func() error {
			_, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{MaxBlocks: -1})
			return err
		}},
		{"bad retry window", "BlockOptions.ReprocessFailed.Within", func() error {
			_, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{ReprocessFailed: &taskling.RetryPolicy{RetryLimit: 1}})
			return err
		}},
		{"zero list block size", "ListBlocksRequest.MaxBlockSize", func() error {
			_, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1}}, nil)
			return err
		}},
		{"oversize item", "ListBlocksRequest.Items[1]", func() error {
			_, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1, string(make([]byte, taskling.MaxBlockValueLength))}, MaxBlockSize: 1}, nil)
			return err
		}},
		{"unencodable object", "values[0]", func() error {
			_, err := e.ObjectBlocks(b.ctx, []any{func() {}}, nil)
			return err
		}},
		{"unknown block", "block 1099511627776", func() error { return b.client.ForceBlock(b.ctx, 1<<40, "ops") }},
	} {
		err := tc.call()
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.field, tc.name)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.block`), "nothing half-written")
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.list_item`))
}

// items lists a block's item statuses in the database.
func (b *testBundle) itemStatuses(t *testing.T, block int64) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT status, count(*) FROM taskling.list_item WHERE block_id = $1 GROUP BY status`, block)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var s, n int
		require.NoError(t, rows.Scan(&s, &n))
		out[taskling.ItemStatus(s).String()] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func TestListItemStatusesAreWrittenAsEachCommitModeSays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode     taskling.CommitMode
		batch    int
		afterN   func(n int) int // completed items in the database after n were completed
		scenario string
	}{
		{taskling.CommitEachItem, 0, func(n int) int { return n }, "each item"},
		{taskling.CommitPeriodically, 10, func(n int) int { return n / 10 * 10 }, "every 10 items"},
		{taskling.CommitAtEnd, 0, func(int) int { return 0 }, "at the end"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			b := setup(t, withLimit(1))
			e := b.start(t, nil)
			values := make([]any, 25)
			for i := range values {
				values[i] = fmt.Sprintf("item-%d", i)
			}
			lists, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: values, MaxBlockSize: 25, Header: map[string]string{"file": "a.csv"},
				Commit: tc.mode, BatchSize: tc.batch}, nil)
			require.NoError(t, err)
			require.Len(t, lists, 1)
			l := lists[0]
			var h map[string]string
			require.NoError(t, l.DecodeHeader(&h))
			require.Equal(t, "a.csv", h["file"])
			items, err := l.Items(b.ctx, taskling.ItemPending)
			require.NoError(t, err)
			require.Len(t, items, 25)
			var v string
			require.NoError(t, items[3].Decode(&v))
			require.Equal(t, "item-3", v)
			for n, it := range items {
				require.NoError(t, l.ItemCompleted(b.ctx, it))
				require.Equal(t, tc.afterN(n+1), b.itemStatuses(t, l.ID)["completed"], "after %d items", n+1)
			}
			require.NoError(t, l.Complete(b.ctx))
			require.Equal(t, map[string]int{"completed": 25}, b.itemStatuses(t, l.ID))
			info, err := b.client.Block(b.ctx, l.ID)
			require.NoError(t, err)
			require.Equal(t, taskling.BlockCompleted, info.Status)
			done, total := b.progress(t, e.ID())
			require.Equal(t, [2]int64{25, 25}, [2]int64{done, total})
			require.ErrorIs(t, l.ItemCompleted(b.ctx, items[0]), taskling.ErrBlockLost, "no writes after the end")
		})
	}
}

func TestAListBlockWithAFailedItemFailsAndItsRetryDoesOnlyWhatIsLeft(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	lists, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{"a", "b", "c", "d"}, MaxBlockSize: 10}, nil)
	require.NoError(t, err)
	l := lists[0]
	items, err := l.Items(b.ctx)
	require.NoError(t, err)
	require.NoError(t, l.ItemCompleted(b.ctx, items[0]))
	require.NoError(t, l.ItemFailed(b.ctx, items[1], "bad row", 2))
	require.NoError(t, l.ItemDiscarded(b.ctx, items[2], "duplicate", 0))
	require.NoError(t, l.Complete(b.ctx)) // items[3] still pending
	info, err := b.client.Block(b.ctx, l.ID)
	require.NoError(t, err)
	require.Equal(t, taskling.BlockFailed, info.Status)
	require.Contains(t, info.Message, "1 items pending, 1 failed")
	require.NoError(t, e.Complete(b.ctx))

	e = b.start(t, nil)
	lists, err = e.ListBlocks(b.ctx, taskling.ListBlocksRequest{}, &taskling.BlockOptions{OnlyOld: true, ReprocessFailed: hour})
	require.NoError(t, err)
	require.Len(t, lists, 1)
	require.Equal(t, 2, lists[0].Attempt)
	left, err := lists[0].Items(b.ctx, taskling.ItemPending, taskling.ItemFailed)
	require.NoError(t, err)
	require.Equal(t, []int{2, 4}, []int{left[0].N, left[1].N})
	require.Equal(t, "bad row", left[0].Reason)
	require.Equal(t, 2, left[0].Step)
	done, total := b.progress(t, e.ID())
	require.Equal(t, [2]int64{2, 4}, [2]int64{done, total}, "what was done before counts")
}

func TestCompleteWritesBufferedItemStatuses(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	lists, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1, 2, 3}, MaxBlockSize: 3, Commit: taskling.CommitAtEnd}, nil)
	require.NoError(t, err)
	items, err := lists[0].Items(b.ctx)
	require.NoError(t, err)
	for _, it := range items {
		require.NoError(t, lists[0].ItemCompleted(b.ctx, it))
	}
	require.Empty(t, b.itemStatuses(t, lists[0].ID)["completed"])
	// Taskling flushed on Dispose without waiting; Complete writes them before it returns.
	require.NoError(t, e.Complete(b.ctx))
	require.Equal(t, 3, b.itemStatuses(t, lists[0].ID)["completed"])
}

func TestAnExecutionWhoseLeaseIsLostWritesNoBlock(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	blocks, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	e.PassLeaseDeadlineForTest()
	err = blocks[0].Complete(b.ctx, 10)
	require.ErrorIs(t, err, taskling.ErrLeaseLost)
	_, err = e.NumericBlocks(b.ctx, noBlocksNew, nil)
	require.True(t, errors.Is(err, taskling.ErrLeaseLost), "got %v", err)
}

func TestAnItemMarkedTwiceBeforeAFlushKeepsItsLastStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	lists, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1, 2}, MaxBlockSize: 2, Commit: taskling.CommitAtEnd}, nil)
	require.NoError(t, err)
	l := lists[0]
	items, err := l.Items(b.ctx)
	require.NoError(t, err)
	require.NoError(t, l.ItemFailed(b.ctx, items[0], "first try", 1))
	require.NoError(t, l.ItemCompleted(b.ctx, items[0]))
	require.NoError(t, l.ItemCompleted(b.ctx, items[1]))
	require.NoError(t, l.Complete(b.ctx))
	require.Equal(t, map[string]int{"completed": 2}, b.itemStatuses(t, l.ID))
	done, total := b.progress(t, e.ID())
	require.Equal(t, [2]int64{2, 2}, [2]int64{done, total}, "counted once")
}

func TestABlockWhoseExecutionRowIsGoneIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(2))
	first := b.start(t, nil)
	made, err := first.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, made[0].Start(b.ctx))
	// Taskling never reclaimed a token whose grantee row was gone; a block of a deleted execution
	// is dead, not stuck.
	b.exec(t, `UPDATE taskling.block SET execution_id = -1 WHERE id = $1`, made[0].ID)
	e := b.start(t, nil)
	got, err := e.NumericBlocks(b.ctx, noBlocksNew, onlyDead)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Attempt)
}

func TestNewListAndObjectBlocksAreAllCreatedWhateverMaxBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	lists, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, MaxBlockSize: 2},
		&taskling.BlockOptions{MaxBlocks: 2})
	require.NoError(t, err)
	require.Len(t, lists, 5, "their items exist only in this call: none may be dropped")
	require.Equal(t, 10, b.count(t, `SELECT count(*) FROM taskling.list_item`))
	objects, err := e.ObjectBlocks(b.ctx, []any{"a", "b", "c"}, &taskling.BlockOptions{MaxBlocks: 1})
	require.NoError(t, err)
	require.Len(t, objects, 3)
}

func TestAForcedBlockTheExecutionCompletedCountsAsNewWork(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	made, err := e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 10, MaxSize: 10}, nil)
	require.NoError(t, err)
	require.NoError(t, made[0].Complete(b.ctx, 10))
	require.NoError(t, b.client.ForceBlock(b.ctx, made[0].ID, "ops"))
	again, err := e.NumericBlocks(b.ctx, noBlocksNew, &taskling.BlockOptions{OnlyOld: true})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.NoError(t, again[0].Complete(b.ctx, 10))
	done, total := b.progress(t, e.ID())
	require.Equal(t, [2]int64{20, 20}, [2]int64{done, total})
}

func TestAnItemOfAnotherBlockIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	lists, err := e.ListBlocks(b.ctx, taskling.ListBlocksRequest{Items: []any{"a1", "a2", "b1", "b2"}, MaxBlockSize: 2}, nil)
	require.NoError(t, err)
	itemsA, err := lists[0].Items(b.ctx)
	require.NoError(t, err)
	require.ErrorIs(t, lists[1].ItemCompleted(b.ctx, itemsA[0]), taskling.ErrInvalidArgument)
	require.ErrorIs(t, lists[1].ItemCompleted(b.ctx, &taskling.ListItem{N: 1}), taskling.ErrInvalidArgument)
}

func TestBlockValuesTheDatabaseCannotStoreAreRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	_, err := e.ObjectBlocks(b.ctx, []any{"a\x00b"}, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	require.Contains(t, err.Error(), "values[0] contains a NUL character")
	_, err = e.NumericBlocks(b.ctx, taskling.NumericRange{From: -1 << 62, To: 1 << 62, MaxSize: 1 << 40}, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	_, err = e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: 1 << 40, MaxSize: 1}, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument, "more than MaxNewBlocks at once")
	require.Contains(t, err.Error(), "BlockOptions.MaxBlocks")
	// A span that does not fall on microseconds: cut on them, the last block never empty.
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got, err := e.DateBlocks(b.ctx, taskling.DateRange{From: from, To: from.Add(time.Hour + 500), MaxSpan: time.Hour}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Zero(t, b.count(t, `SELECT count(*) FROM taskling.block WHERE kind <> 2`))
	_, err = b.pool.Exec(b.ctx, `UPDATE taskling.block SET to_date = NULL`)
	require.Error(t, err, "a range without an end is refused by the table")
}

// TestARangeOfExactlyMaxNewBlocksIsTaken: MaxNewBlocks blocks in one call are allowed for dates as
// for numbers, one more is refused (a date range of exactly MaxNewBlocks spans was refused, and
// one longer than a Duration holds was let through).
func TestARangeOfExactlyMaxNewBlocksIsTaken(t *testing.T) {
	t.Parallel()
	b := setup(t, withLimit(1))
	e := b.start(t, nil)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	over := taskling.DateRange{From: from, To: from.Add((taskling.MaxNewBlocks + 1) * time.Microsecond), MaxSpan: time.Microsecond}
	_, err := e.DateBlocks(b.ctx, over, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument, "MaxNewBlocks + 1 blocks")
	_, err = e.NumericBlocks(b.ctx, taskling.NumericRange{From: 1, To: taskling.MaxNewBlocks + 1, MaxSize: 1}, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument, "MaxNewBlocks + 1 blocks")
	// Longer than a Duration holds (~292 years): ~199 000 blocks, refused.
	long := taskling.DateRange{From: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC), MaxSpan: 44 * time.Hour}
	_, err = e.DateBlocks(b.ctx, long, nil)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument, "a thousand years of 44 h blocks")
	exact := taskling.DateRange{From: from, To: from.Add(taskling.MaxNewBlocks * time.Microsecond), MaxSpan: time.Microsecond}
	got, err := e.DateBlocks(b.ctx, exact, nil)
	require.NoError(t, err)
	require.Len(t, got, taskling.MaxNewBlocks)
}

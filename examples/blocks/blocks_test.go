package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

// TestMain lets the test run the program as a process without building it: the test binary
// started with BLOCKS_RUN_MAIN=1 is the program (under -race, so is the program).
func TestMain(m *testing.M) {
	if os.Getenv("BLOCKS_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAnImportKilledMidRunResumesWhereItStopped runs the import as a real process on a fresh
// database, SIGKILLs it in the middle of a block, and runs it again. The second run imports
// exactly the rows not yet written as completed at the kill (none of the others: their
// updated_at does not move), gives the block in progress its second attempt, retries every row
// that failed on its first try, and ends with every row completed.
func TestAnImportKilledMidRunResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	const rows, blockSize, failEvery = 20_000, 500, 997
	pool, dbURL := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"-rows", strconv.Itoa(rows), "-block-size", strconv.Itoa(blockSize), "-fail-every", strconv.Itoa(failEvery),
		"-slow", "150us", "-v"}

	// Run 1, killed once at least 3 000 rows are completed and a block is half done.
	first := startProgram(t, ctx, dbURL, args...)
	start := time.Now()
	for {
		var done int
		var midBlock bool
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM taskling.list_item WHERE status = 2),
            EXISTS (SELECT 1 FROM taskling.block b WHERE b.status = 2 AND (SELECT count(*) FROM taskling.list_item i
                WHERE i.block_id = b.id AND i.status = 2) BETWEEN 1 AND b.item_count - 200)`).Scan(&done, &midBlock)
		if err != nil {
			t.Fatal(err)
		}
		if done >= 3000 && midBlock {
			break
		}
		select {
		case <-first.done:
			t.Fatalf("run 1 ended before it could be killed (%d rows done): %v\n%s", done, first.err, first.out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("run 1 never got half-way through a block with 3000 rows done (%d done)\n%s", done, first.out.String())
		}
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.wait()
	t.Logf("run 1 killed after %s", time.Since(start).Round(time.Millisecond))
	// A statement the server had received still commits after the kill: wait until the killed
	// process's connections are gone before taking the snapshot.
	for n := 1; n > 0; time.Sleep(10 * time.Millisecond) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
			applicationName).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	atKill := itemSnapshot(t, pool)
	var started []int64 // the blocks in progress at the kill
	if err := queryInts(ctx, pool, &started, `SELECT id FROM taskling.block WHERE status = 2 ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	if len(started) != 1 {
		t.Fatalf("%d blocks in progress at the kill (%v); want 1", len(started), started)
	}
	inProgress := started[0]
	var notStarted, failed []int64 // taken by run 1 but never started; failed by run 1
	if err := queryInts(ctx, pool, &notStarted, `SELECT id FROM taskling.block WHERE status = 1 ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	if err := queryInts(ctx, pool, &failed, `SELECT id FROM taskling.block WHERE status = 4 ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	counts := map[int16]int{}
	for _, it := range atKill {
		counts[it.status]++
	}
	t.Logf("at the kill: %d items completed, %d failed, %d pending; block %d in progress", counts[2], counts[3], counts[1], inProgress)
	if len(atKill) != rows || counts[2] < 3000 || counts[1] == 0 {
		t.Fatalf("at the kill: %d items, %v by status; want %d items, at least 3000 completed and some pending", len(atKill), counts, rows)
	}

	// Run 2 waits for the dead run's slot, then finishes the import.
	second := startProgram(t, ctx, dbURL, args...)
	if err := second.wait(); err != nil {
		t.Fatalf("run 2: %v\n%s", err, second.out.String())
	}
	t.Logf("both runs took %s", time.Since(start).Round(time.Millisecond))
	out1, out2 := first.out.String(), second.out.String()
	if !strings.Contains(out2, "the blocks exist: took ") || !strings.Contains(out2, fmt.Sprintf("import complete: %d of %d blocks completed", rows/blockSize, rows/blockSize)) {
		t.Errorf("run 2's output lacks the resume or the completion:\n%s", out2)
	}
	exec1, exec2 := executionID(t, out1), executionID(t, out2)

	// Every row is imported: one item each, all completed; every block completed.
	final := itemSnapshot(t, pool)
	if len(final) != rows {
		t.Fatalf("%d items; want %d", len(final), rows)
	}
	for r := 1; r <= rows; r++ {
		if it, ok := final[r]; !ok || it.status != 2 {
			t.Errorf("row %d: item %+v (found: %t); want completed", r, it, ok)
		}
	}
	var notCompleted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM taskling.block WHERE status <> 3`).Scan(&notCompleted); err != nil {
		t.Fatal(err)
	}
	if notCompleted != 0 {
		t.Errorf("%d blocks not completed", notCompleted)
	}

	// Run 2 did exactly the rows not completed at the kill: the completed ones were neither
	// done again nor written again.
	done1, done2 := rowLines(out1), rowLines(out2)
	for r, it := range atKill {
		_, again := done2[r]
		switch {
		case it.status == 2 && again:
			t.Errorf("row %d, completed before the kill, was done again by run 2: %v", r, done2[r])
		case it.status == 2 && !final[r].updatedAt.Equal(it.updatedAt):
			t.Errorf("row %d, completed before the kill, was written again (updated_at %s, then %s)", r, it.updatedAt, final[r].updatedAt)
		case it.status != 2 && !again:
			t.Errorf("row %d (status %d at the kill) was not done by run 2", r, it.status)
		}
	}
	// Each row's outcomes, in order, across both runs: a row divisible by failEvery fails on its
	// first try and is imported by a retry; the others are imported at once. A row done twice
	// without failing is allowed only if its status was not yet written at the kill.
	failing := 0
	for r := 1; r <= rows; r++ {
		seq := append(slices.Clone(done1[r]), done2[r]...)
		want := []string{"imported"}
		if r%failEvery == 0 {
			want = []string{"failed", "imported"}
			failing++
		}
		if atKill[r].status == 1 && len(done1[r]) > 0 && slices.Equal(done2[r], want) { // done by run 1, not written by the kill
			continue
		}
		if !slices.Equal(seq, want) {
			t.Errorf("row %d: %v (run 1: %v, run 2: %v); want %v", r, seq, done1[r], done2[r], want)
		}
	}
	if failing != rows/failEvery {
		t.Fatalf("%d failing rows; want %d", failing, rows/failEvery)
	}

	// The block in progress at the kill: attempt 1 by run 1, never ended; then run 2's attempts,
	// the last completed. The blocks run 1 failed were retried and completed by run 2; and run 2
	// retried blocks it had failed itself (rows that failed in run 2).
	attempts := blockAttempts(t, pool)
	want := []attempt{{1, exec1, 2}}
	for _, a := range attempts[inProgress][min(1, len(attempts[inProgress])):] {
		want = append(want, attempt{len(want) + 1, exec2, a.status})
	}
	if a := attempts[inProgress]; !slices.Equal(a, want) || len(a) < 2 || a[len(a)-1].status != 3 {
		t.Errorf("block %d, in progress at the kill: attempts %v; want attempt 1 by execution %d left started, then execution %d's, the last completed",
			inProgress, a, exec1, exec2)
	}
	// Run 2 takes the dead blocks never started first, then the one started (in progress at the
	// kill), then the failed ones (docs/blocks.md, "What an execution gets"; the README's sample).
	turn := map[int64]int{}
	for i, m := range regexp.MustCompile(`(?m)block (\d+) attempt \d+:`).FindAllStringSubmatch(out2, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		if _, ok := turn[id]; !ok {
			turn[id] = i
		}
	}
	if len(notStarted) == 0 || len(failed) == 0 {
		t.Errorf("at the kill: blocks never started %v, failed %v; want some of each", notStarted, failed)
	}
	for _, id := range append(append([]int64{inProgress}, notStarted...), failed...) {
		if _, ok := turn[id]; !ok {
			t.Errorf("run 2 did not take block %d", id)
		}
	}
	for _, id := range notStarted {
		if turn[id] >= turn[inProgress] {
			t.Errorf("run 2 took block %d (never started) at turn %d, after block %d (started, in progress at the kill) at turn %d", id, turn[id], inProgress, turn[inProgress])
		}
	}
	for _, id := range failed {
		if turn[id] <= turn[inProgress] {
			t.Errorf("run 2 took block %d (failed) at turn %d, before block %d (in progress at the kill) at turn %d", id, turn[id], inProgress, turn[inProgress])
		}
	}
	retriedFromRun1, retriedByRun2 := 0, 0
	for id, as := range attempts {
		last := as[len(as)-1]
		if last.status != 3 || !slices.ContainsFunc(as, func(a attempt) bool { return a.execution == exec2 }) {
			if id != inProgress && (last.status != 3 || slices.ContainsFunc(as, func(a attempt) bool { return a.execution != exec1 })) {
				t.Errorf("block %d: attempts %v; want it completed by run 1 or by run 2", id, as)
			}
			continue
		}
		for i, a := range as[:len(as)-1] {
			if a.status == 4 && a.execution == exec1 {
				retriedFromRun1++
			}
			if a.status == 4 && a.execution == exec2 && as[i+1].execution == exec2 {
				retriedByRun2++
			}
		}
	}
	if retriedFromRun1 == 0 || retriedByRun2 == 0 {
		t.Errorf("blocks failed by run 1 and retried by run 2: %d; failed and retried by run 2 itself: %d; want some of each",
			retriedFromRun1, retriedByRun2)
	}
	if t.Failed() {
		t.Logf("run 1:\n%s\nrun 2:\n%s", blockLines(out1), blockLines(out2))
	}
}

// TestFailedRowsAreRetriedInTheSameRunAndARerunHasNothingToDo: without a kill, one run imports
// everything, taking again the blocks it failed (a row fails on its first try); running it again
// finds nothing to do, and a run for another file on the same task is refused.
func TestFailedRowsAreRetriedInTheSameRunAndARerunHasNothingToDo(t *testing.T) {
	t.Parallel()
	const rows, blockSize, failEvery = 3000, 250, 97
	pool, dbURL := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"-rows", strconv.Itoa(rows), "-block-size", strconv.Itoa(blockSize), "-fail-every", strconv.Itoa(failEvery),
		"-slow", "0", "-v"}
	run := startProgram(t, ctx, dbURL, args...)
	if err := run.wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, run.out.String())
	}
	out := run.out.String()
	exec1 := executionID(t, out)
	done := rowLines(out)
	for r := 1; r <= rows; r++ {
		want := []string{"imported"}
		if r%failEvery == 0 {
			want = []string{"failed", "imported"}
		}
		if !slices.Equal(done[r], want) {
			t.Errorf("row %d: %v; want %v", r, done[r], want)
		}
	}
	hasFailing := map[int64]bool{}
	for r, it := range itemSnapshot(t, pool) {
		hasFailing[it.block] = hasFailing[it.block] || r%failEvery == 0
	}
	attempts := blockAttempts(t, pool)
	if len(attempts) != rows/blockSize {
		t.Errorf("%d blocks attempted; want %d", len(attempts), rows/blockSize)
	}
	for id, as := range attempts {
		want := []attempt{{1, exec1, 3}}
		if hasFailing[id] {
			want = []attempt{{1, exec1, 4}, {2, exec1, 3}}
		}
		if !slices.Equal(as, want) {
			t.Errorf("block %d: attempts %v; want %v", id, as, want)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("import complete: %[1]d of %[1]d blocks completed", rows/blockSize)) {
		t.Errorf("output lacks the completion:\n%s", out)
	}

	again := startProgram(t, ctx, dbURL, args...)
	if err := again.wait(); err != nil {
		t.Fatalf("second run: %v\n%s", err, again.out.String())
	}
	if out := again.out.String(); !strings.Contains(out, "the blocks exist: took 0 old ones") || len(rowLines(out)) != 0 ||
		!strings.Contains(out, fmt.Sprintf("import complete: %[1]d of %[1]d blocks completed", rows/blockSize)) {
		t.Errorf("second run's output: want nothing done and the import complete:\n%s", out)
	}
	var blocks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM taskling.block`).Scan(&blocks); err != nil {
		t.Fatal(err)
	}
	if blocks != rows/blockSize {
		t.Errorf("%d blocks after the second run; want %d", blocks, rows/blockSize)
	}

	other := startProgram(t, ctx, dbURL, append(args, "-rows", "10")...)
	err := other.wait()
	if want := "task examples/import holds the blocks of rows-3000.jsonl (3000 rows), not of rows-10.jsonl"; err == nil ||
		!strings.Contains(other.out.String(), want) {
		t.Errorf("a run for another file: %v; want a failure saying %q:\n%s", err, want, other.out.String())
	}
}

type program struct {
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{} // closed when it has exited, with err set
	err  error
}

func (p *program) wait() error {
	<-p.done
	return p.err
}

// startProgram starts the program (this test binary, as the program) on dbURL; the test's end
// kills it if it still runs.
func startProgram(t *testing.T, ctx context.Context, dbURL string, args ...string) *program {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &program{cmd: exec.CommandContext(ctx, self, args...), out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	// The URL in the environment: on a command line, anyone could read its password (ps).
	p.cmd.Env = append(os.Environ(), "BLOCKS_RUN_MAIN=1", "TASKLING_DATABASE_URL="+dbURL)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

var executionRE = regexp.MustCompile(`execution (\d+) started`)

func executionID(t *testing.T, out string) int64 {
	t.Helper()
	m := executionRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no execution started:\n%s", out)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id
}

var rowRE = regexp.MustCompile(`(?m)^row (\d+): (imported|failed)$`)

// rowLines returns each row's outcomes printed by a run (-v), in order.
func rowLines(out string) map[int][]string {
	m := map[int][]string{}
	for _, l := range rowRE.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(l[1])
		m[r] = append(m[r], l[2])
	}
	return m
}

// blockLines keeps the lines of a run's output that are not per row.
func blockLines(out string) string {
	return rowRE.ReplaceAllString(out, "")
}

type item struct {
	block     int64
	status    int16
	updatedAt time.Time
}

// itemSnapshot returns every list item by its row.
func itemSnapshot(t *testing.T, pool *pgxpool.Pool) map[int]item {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT (value->>'row')::int, block_id, status, updated_at FROM taskling.list_item`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[int]item{}
	for rows.Next() {
		var r int
		var it item
		if err := rows.Scan(&r, &it.block, &it.status, &it.updatedAt); err != nil {
			t.Fatal(err)
		}
		if _, dup := m[r]; dup {
			t.Errorf("row %d is in two items", r)
		}
		m[r] = it
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

type attempt struct {
	n         int
	execution int64
	status    int16
}

// blockAttempts returns every block's attempts, in order.
func blockAttempts(t *testing.T, pool *pgxpool.Pool) map[int64][]attempt {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT block_id, attempt, execution_id, status FROM taskling.block_attempt ORDER BY block_id, attempt`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[int64][]attempt{}
	for rows.Next() {
		var id int64
		var a attempt
		if err := rows.Scan(&id, &a.n, &a.execution, &a.status); err != nil {
			t.Fatal(err)
		}
		m[id] = append(m[id], a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func queryInts(ctx context.Context, pool *pgxpool.Pool, dst *[]int64, sql string) error {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return err
		}
		*dst = append(*dst, v)
	}
	return rows.Err()
}

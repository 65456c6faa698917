package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/checker"
	"github.com/taskling-go/taskling/integration_test/ledger"
)

// blockProfile sizes TestChaosBlocks.
type blockProfile struct {
	name                string
	procs, g, limit     int // worker processes × goroutines, on one task of this limit
	from, to, size      int64
	maxBlocks           int
	retryLimit, failPct int
	kills               int
	work                time.Duration // longest work on one block
	interval, threshold time.Duration
	timeout             time.Duration // for every block to complete
}

func chosenBlockProfile() blockProfile {
	// Short: 30 blocks, two kills; a few seconds of work.
	p := blockProfile{name: "short", procs: 4, g: 2, limit: 3, from: 1, to: 30_000, size: 1000, maxBlocks: 5, retryLimit: 3, failPct: 5,
		kills: 2, work: 10 * time.Millisecond, interval: 200 * time.Millisecond, threshold: time.Second, timeout: 2 * time.Minute}
	if os.Getenv("TASKLING_CHAOS") == "long" {
		p.name, p.to, p.kills, p.timeout = "long", 200_000, 3, 10*time.Minute
	}
	return p
}

// blockTask is the one task of TestChaosBlocks.
const blockTask = "blocks"

// TestChaosBlocks runs executions that split a numeric range into blocks in several worker
// processes at a limit (each asks for a few blocks at a time, continuing from the last block and
// taking dead and failed ones again first; the first attempt of some blocks fails on purpose),
// SIGKILLs the process holding the most live blocks several times (a replacement starts each
// time), and checks with package checker that the blocks cover the range exactly once, each
// completed by exactly one attempt, that no two attempts of a block were live at once, that
// every attempt that died or failed was taken again within the retry limit — and the checks of
// slots on the executions themselves.
func TestChaosBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test skipped in -short mode")
	}
	prof := chosenBlockProfile()
	began := time.Now()
	ctx := context.Background()
	env := newChaosEnv(t, ctx)
	ledgers, bin, srv, dbURL, pool, nem := env.ledgers, env.bin, env.srv, env.dbURL, env.pool, env.nem

	spec := workerSpec{bin: bin, dbURL: dbURL, dir: ledgers, tasks: fmt.Sprintf("%s=%d", blockTask, prof.limit), g: prof.g,
		interval: prof.interval, threshold: prof.threshold, sameClock: srv.cluster != nil,
		extra: []string{"-blocks", "-range", fmt.Sprintf("%d:%d:%d", prof.from, prof.to, prof.size), "-max-blocks", fmt.Sprint(prof.maxBlocks),
			"-retry-limit", fmt.Sprint(prof.retryLimit), "-fail-pct", fmt.Sprint(prof.failPct), "-hold", prof.work.String(), "-step", "1ms"}}
	r := &run{t: t, spec: spec, srv: srv, pool: pool, nem: nem,
		counts: map[string]int{}, kills: map[string]time.Time{}, killSignal: map[string]time.Time{}}
	for slot := range prof.procs {
		r.procs = append(r.procs, startProc(t, spec, slot, 0, nil))
	}
	defer r.killAll()
	workStart := time.Now()

	// The kills, spread over the run by completed blocks: each hits the process holding the
	// most live blocks at that moment.
	total := int((prof.to - prof.from + prof.size) / prof.size)
	var kills []string
	for k := 1; k <= prof.kills; k++ {
		if !waitBlocksCompleted(t, pool, total*k/(prof.kills+1), prof.timeout-time.Since(workStart)) {
			break
		}
		kills = append(kills, r.killBlockHolder((prof.maxBlocks+1)/2))
	}
	completedAll := waitBlocksCompleted(t, pool, total, prof.timeout-time.Since(workStart))
	wall := time.Since(workStart)
	r.stopAll()

	h := checker.History{
		InitialLimit: map[string]int{blockTask: prof.limit},
		Kills:        r.kills,
		LeaseTTL:     prof.threshold - prof.threshold*taskling.DefaultSafetyMarginPercent/100,
		Grace:        2 * prof.interval,
	}
	h.Before = taskStates(t, ctx, pool, app)
	limits := map[string]int{blockTask: prof.limit}
	sweep(t, ctx, pool, app, ledgers, srv.cluster != nil, prof.interval, prof.threshold, limits, limits)
	h.After = taskStates(t, ctx, pool, app)
	h.Grants = readGrants(t, ctx, pool, app)
	lh := readLedgers(t, ledgers)
	h.Holds = lh.holds
	h.Blocks = &checker.BlockRun{Task: blockTask, From: prof.from, To: prof.to, Size: prof.size, RetryLimit: prof.retryLimit,
		Blocks: readBlocks(t, ctx, pool, app, blockTask), Logs: readBlockLogs(t, ledgers)}
	rep := checker.Check(h)

	printBlockFigures(t, prof, h, rep, kills, wall, time.Since(began))
	if !completedAll {
		t.Errorf("not every block completed within %s", prof.timeout)
	}
	if len(kills) < prof.kills {
		t.Errorf("%d kills of %d", len(kills), prof.kills)
	}
	for _, v := range rep.Violations {
		t.Errorf("violation %s", v)
	}
	if t.Failed() || os.Getenv("TASKLING_CHAOS_KEEP") != "" {
		t.Logf("ledgers kept in %s", keep(t, ledgers))
	}
}

// waitBlocksCompleted waits until at least n blocks have completed, up to timeout.
func waitBlocksCompleted(t *testing.T, pool *pgxpool.Pool, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var done int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM taskling.block WHERE status = 3`).Scan(&done)
		cancel()
		if err == nil && done >= n {
			return true
		}
		if time.Now().After(deadline) {
			var counts string
			_ = pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(status || ': ' || n, ', '), '') FROM (SELECT status, count(*) AS n FROM taskling.block GROUP BY 1 ORDER BY 1) s`).Scan(&counts)
			t.Logf("waiting for %d completed blocks: timed out; blocks by status (1 not started, 2 started, 3 completed, 4 failed): %s", n, counts)
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killBlockHolder SIGKILLs the live worker process whose running executions hold the most
// blocks not yet ended, waiting up to three seconds for one that holds at least want of them
// (an execution takes its blocks at once and works through them one by one: a process picked at
// the end of its executions would hold next to nothing), and starts its replacement. It returns
// a description of the kill.
func (r *run) killBlockHolder(want int) string {
	deadline := time.Now().Add(3 * time.Second)
	for {
		held := map[string]int{}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rows, err := r.pool.Query(ctx, `
SELECT e.host_name, count(*) FROM taskling.block b JOIN taskling.task_execution e ON e.id = b.execution_id
WHERE b.status IN (1, 2) AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)
GROUP BY 1`)
		if err == nil {
			for rows.Next() {
				var h string
				var n int
				if rows.Scan(&h, &n) == nil {
					held[h] = n
				}
			}
			rows.Close()
		}
		cancel()
		r.mu.Lock()
		var victim *proc
		for _, p := range r.procs {
			if p.alive() && (victim == nil || held[p.host] > held[victim.host]) {
				victim = p
			}
		}
		r.mu.Unlock()
		if victim == nil {
			r.t.Errorf("no live worker process to kill")
			return ""
		}
		if held[victim.host] >= want || time.Now().After(deadline) {
			note := fmt.Sprintf("%d live blocks held", held[victim.host])
			r.killProc(victim, note)
			r.logf("fault %s %s: %s", fKill, victim.host, note)
			return victim.host + ": " + note
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readBlocks reads the blocks of app/task with their attempts.
func readBlocks(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app, task string) []checker.BlockState {
	names := map[int16]string{1: "not_started", 2: "started", 3: "completed", 4: "failed"}
	rows, err := pool.Query(ctx, `
SELECT b.id, b.from_number, b.to_number, b.attempts, b.status,
       coalesce(array_agg(a.attempt ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}'),
       coalesce(array_agg(a.execution_id ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}'),
       coalesce(array_agg(a.status ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}'),
       coalesce(array_agg(a.created_at ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}'),
       coalesce(array_agg(coalesce(a.ended_at, 'epoch'::timestamptz) ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}')
FROM taskling.block b JOIN taskling.task_definition d ON d.id = b.task_id
LEFT JOIN taskling.block_attempt a ON a.block_id = b.id
WHERE d.application_name = $1 AND d.task_name = $2 AND b.kind = 1
GROUP BY b.id ORDER BY b.from_number`, app, task)
	require.NoError(t, err)
	defer rows.Close()
	var out []checker.BlockState
	for rows.Next() {
		var b checker.BlockState
		var status int16
		var attempts []int32
		var execs []int64
		var statuses []int16
		var created, ended []time.Time
		require.NoError(t, rows.Scan(&b.ID, &b.From, &b.To, &b.Attempts, &status, &attempts, &execs, &statuses, &created, &ended))
		b.Status = names[status]
		for i := range attempts {
			a := checker.BlockAttemptState{Attempt: int(attempts[i]), Exec: execs[i], Status: names[statuses[i]], CreatedAt: created[i]}
			if ended[i].Unix() != 0 {
				a.EndedAt = ended[i]
			}
			b.Runs = append(b.Runs, a)
		}
		out = append(out, b)
	}
	require.NoError(t, rows.Err())
	return out
}

// readBlockLogs reads the block attempts the ledgers of dir recorded.
func readBlockLogs(t *testing.T, dir string) []checker.BlockLog {
	evs, err := ledger.ReadDir(dir)
	require.NoError(t, err)
	type key struct {
		block   int64
		attempt int
	}
	logs := map[key]*checker.BlockLog{}
	var order []key
	for _, e := range evs {
		k := key{e.Block, e.Attempt}
		switch e.Kind {
		case ledger.KindBlockTake:
			if _, dup := logs[k]; dup {
				t.Errorf("ledger: block %d attempt %d taken twice (%s)", e.Block, e.Attempt, e.Host)
				continue
			}
			logs[k] = &checker.BlockLog{Block: e.Block, Attempt: e.Attempt, Exec: e.Exec, Host: e.Host, From: e.BlockFrom, To: e.BlockTo, TakenAt: e.At}
			order = append(order, k)
		case ledger.KindBlockStart:
			if l := logs[k]; l != nil {
				l.Started = e.At
			}
		case ledger.KindBlockStop:
			if l := logs[k]; l != nil {
				l.Stopped, l.StopAt, l.Calling, l.Reason = true, e.At, e.Note, e.Reason
			}
		case ledger.KindBlockEnd:
			if l := logs[k]; l != nil {
				l.Result = e.Result
			}
		}
	}
	out := make([]checker.BlockLog, 0, len(order))
	for _, k := range order {
		out = append(out, *logs[k])
	}
	return out
}

// printBlockFigures prints the run's figures.
func printBlockFigures(t *testing.T, prof blockProfile, h checker.History, rep checker.Report, kills []string, wall, took time.Duration) {
	f := rep.Blocks
	execs, empty := 0, 0
	took1 := map[int64]bool{}
	for _, l := range h.Blocks.Logs {
		took1[l.Exec] = true
	}
	for _, g := range h.Grants {
		if g.Task == blockTask && g.Host != "sweeper" {
			execs++
			if !took1[g.Exec] {
				empty++
			}
		}
	}
	onPurpose, errs := 0, 0
	for _, l := range h.Blocks.Logs {
		if l.Result == ledger.BlockFailed {
			onPurpose++
		}
		if l.Reason == ledger.ReasonError || l.Result == ledger.ResultError {
			errs++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nblocks chaos run (%s profile): %d processes × %d goroutines on one task at limit %d, range %d…%d in blocks of %d (MaxBlocks %d, retry limit %d), threshold %s, heartbeat %s, %s in all\n",
		prof.name, prof.procs, prof.g, prof.limit, prof.from, prof.to, prof.size, prof.maxBlocks, prof.retryLimit, prof.threshold, prof.interval, took.Round(time.Second))
	fmt.Fprintf(&b, "  %-40s %d\n", "blocks", f.Blocks)
	fmt.Fprintf(&b, "  %-40s %d (blocks taken again: %d; most attempts of one block: %d)\n", "attempts", f.Attempts, f.Retaken, f.MostAttempts)
	fmt.Fprintf(&b, "  %-40s %d (failed on purpose, as the ledgers say: %d)\n", "failed attempts", f.Failed, onPurpose)
	fmt.Fprintf(&b, "  %-40s %d\n", "dead attempts (process killed)", f.Dead)
	fmt.Fprintf(&b, "  %-40s %d\n", "attempts lost (ErrBlockLost)", f.Lost)
	fmt.Fprintf(&b, "  %-40s %d\n", "attempts unrecorded (killed first)", f.Unrecorded)
	fmt.Fprintf(&b, "  %-40s %d\n", "Start/Complete/Fail errors", errs)
	fmt.Fprintf(&b, "  %-40s %d (%d took no block)\n", "executions", execs, empty)
	fmt.Fprintf(&b, "  %-40s %d (limit %d)\n", "most holders at once", rep.MaxHolders[blockTask], prof.limit)
	fmt.Fprintf(&b, "  %-40s %d\n", "kills", len(kills))
	for _, k := range kills {
		fmt.Fprintf(&b, "  %-40s %s\n", "  kill -9", k)
	}
	fmt.Fprintf(&b, "  %-40s %s (%.0f blocks/s)\n", "wall time (first worker → all completed)", wall.Round(time.Millisecond), float64(f.Blocks)/wall.Seconds())
	fmt.Fprintf(&b, "  %-40s %d\n", "violations", len(rep.Violations))
	t.Log(b.String())
	fmt.Println(b.String())
}

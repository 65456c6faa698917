package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/checker"
	"github.com/taskling-go/taskling/integration_test/ledger"
)

// submissionProfile sizes TestChaosSubmissions.
type submissionProfile struct {
	name                string
	procs, workers      int // worker processes × Work's Workers
	limit               int // the task's concurrency limit
	submissions, kills  int
	hold                time.Duration // longest attempt
	interval, threshold time.Duration
	failEvery           int64         // the first attempt of every failEvery'th submission fails on purpose
	timeout             time.Duration // for every submission to complete
}

func chosenSubmissionProfile() submissionProfile {
	// Short: 1000 submissions, one kill; about a minute on a loaded 2-core machine, where the
	// task's serialized token transactions run some 25–45 attempts/s.
	p := submissionProfile{name: "short", procs: 4, workers: 10, limit: 8, submissions: 1000, kills: 1, hold: 20 * time.Millisecond,
		interval: 200 * time.Millisecond, threshold: 2 * time.Second, failEvery: 97, timeout: 3 * time.Minute}
	if os.Getenv("TASKLING_CHAOS") == "long" {
		p.name, p.submissions, p.kills, p.timeout = "long", 10000, 3, 15*time.Minute
	}
	return p
}

// subTask is the one task of TestChaosSubmissions.
const subTask = "subs"

// submitted is one submission as Submit returned it.
type submitted struct {
	id       int64
	ref      string
	priority int
}

// priorityOf spreads the submissions over three priorities, most at 0.
func priorityOf(i int) int {
	switch {
	case i%20 == 7:
		return 5
	case i%7 == 3:
		return 1
	}
	return 0
}

// TestChaosSubmissions runs submissions through Work in several worker processes at a limit,
// SIGKILLs some of the processes while they run (a replacement starts each time), and checks
// with package checker that every submission completed exactly once, that no two holders ran one
// submission at once, that the limit held, and that waiters were granted in queue order.
func TestChaosSubmissions(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test skipped in -short mode")
	}
	prof := chosenSubmissionProfile()
	began := time.Now()
	ctx := context.Background()
	env := newChaosEnv(t, ctx)
	ledgers, bin, srv, dbURL, pool, nem := env.ledgers, env.bin, env.srv, env.dbURL, env.pool, env.nem
	var err error
	submitter, err := taskling.NewClient(pool, &taskling.Config{HostName: "submitter"})
	require.NoError(t, err)
	defer submitter.Close()

	// Half the submissions before any worker starts, the rest while they run.
	subs := make([]submitted, prof.submissions)
	submitAll := func(from, to int) error {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Go(func() {
				for i := from + w; i < to; i += 4 {
					p := priorityOf(i)
					s := submitted{ref: fmt.Sprintf("s-%d", i), priority: p}
					id, err := submitter.Submit(ctx, app, subTask, &taskling.SubmitOptions{Header: map[string]int{"n": i, "p": p},
						ReferenceValue: s.ref, Priority: p, MaxAttempts: 10})
					if err != nil {
						errs <- fmt.Errorf("submit %d: %w", i, err)
						return
					}
					s.id = id
					subs[i] = s
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	require.NoError(t, submitAll(0, prof.submissions/2))

	qw, err := ledger.Create(filepath.Join(ledgers, "queues.jsonl"))
	require.NoError(t, err)
	defer qw.Close()
	qctx, stopQueues := context.WithCancel(ctx)
	defer stopQueues()
	snapshots := make(chan int, 1)
	go func() { snapshots <- watchQueues(qctx, pool, app, qw, 10*time.Millisecond) }()

	spec := workerSpec{bin: bin, dbURL: dbURL, dir: ledgers, tasks: fmt.Sprintf("%s=%d", subTask, prof.limit), g: prof.workers,
		interval: prof.interval, threshold: prof.threshold, sameClock: srv.cluster != nil,
		extra: []string{"-work", "-hold", prof.hold.String(), "-step", "2ms", "-fail-every", fmt.Sprint(prof.failEvery)}}
	r := &run{t: t, spec: spec, srv: srv, pool: pool, nem: nem,
		counts: map[string]int{}, kills: map[string]time.Time{}, killSignal: map[string]time.Time{}}
	for slot := range prof.procs {
		r.procs = append(r.procs, startProc(t, spec, slot, 0, nil))
	}
	defer r.killAll()
	workStart := time.Now()
	rest := make(chan error, 1)
	go func() { rest <- submitAll(prof.submissions/2, prof.submissions) }()

	// A duplicate reference while the workers run returns the first submission's id.
	dup, err := submitter.Submit(ctx, app, subTask, &taskling.SubmitOptions{ReferenceValue: subs[17].ref, Priority: 9, MaxAttempts: 1})
	require.NoError(t, err)
	require.Equal(t, subs[17].id, dup, "a duplicate reference must return the existing submission's id")

	// The kills, evenly spread over the run by completions; each waits for the killed process's
	// slots to be reclaimed.
	var kills []killFigures
	for k := 1; k <= prof.kills; k++ {
		if !waitCompleted(t, pool, prof.submissions*k/(prof.kills+1), prof.timeout-time.Since(workStart)) {
			break
		}
		kills = append(kills, r.killWorker(prof.threshold))
	}
	require.NoError(t, <-rest)
	completedAll := waitCompleted(t, pool, prof.submissions, prof.timeout-time.Since(workStart))
	wall := time.Since(workStart)
	r.stopAll()
	stopQueues()
	nSnapshots := <-snapshots

	// A duplicate reference after completion still returns the first id, and stores nothing.
	dup, err = submitter.Submit(ctx, app, subTask, &taskling.SubmitOptions{ReferenceValue: subs[0].ref})
	require.NoError(t, err)
	require.Equal(t, subs[0].id, dup, "a duplicate reference of a completed submission must return its id")
	var stored int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM taskling.submission`).Scan(&stored))
	require.Equal(t, prof.submissions, stored, "submissions stored (duplicates store nothing)")

	h := checker.History{
		InitialLimit: map[string]int{subTask: prof.limit},
		Kills:        r.kills,
		LeaseTTL:     prof.threshold - prof.threshold*taskling.DefaultSafetyMarginPercent/100,
		Grace:        2 * prof.interval,
	}
	h.Before = taskStates(t, ctx, pool, app)
	limits := map[string]int{subTask: prof.limit}
	sweep(t, ctx, pool, app, ledgers, srv.cluster != nil, prof.interval, prof.threshold, limits, limits)
	h.After = taskStates(t, ctx, pool, app)
	h.Grants = readGrants(t, ctx, pool, app)
	lh := readLedgers(t, ledgers)
	h.Holds, h.Queues = lh.holds, lh.queues
	h.Submissions = readSubmissions(t, ctx, pool, app)
	rep := checker.Check(h)

	printSubmissionFigures(t, prof, h, rep, kills, nSnapshots, wall, time.Since(began))
	if !completedAll {
		t.Errorf("not every submission completed within %s", prof.timeout)
	}
	for _, s := range h.Submissions {
		if prof.failEvery > 0 && s.ID%prof.failEvery == 0 && s.Attempts < 2 {
			t.Errorf("submission %d: its first attempt failed on purpose, yet it made %d attempts", s.ID, s.Attempts)
		}
	}
	for _, v := range rep.Violations {
		t.Errorf("violation %s", v)
	}
	if t.Failed() || os.Getenv("TASKLING_CHAOS_KEEP") != "" { // keep them for a post-mortem
		t.Logf("ledgers kept in %s", keep(t, ledgers))
	}
}

// waitCompleted waits until at least n submissions have completed, up to timeout.
func waitCompleted(t *testing.T, pool *pgxpool.Pool, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var done int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM taskling.submission WHERE status = 3`).Scan(&done)
		cancel()
		if err == nil && done >= n {
			return true
		}
		if time.Now().After(deadline) {
			var counts string
			_ = pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(status || ': ' || n, ', '), '') FROM (SELECT status, count(*) AS n FROM taskling.submission GROUP BY 1 ORDER BY 1) s`).Scan(&counts)
			t.Logf("waiting for %d completions: timed out; submissions by status (1 waiting, 2 in progress, 3 completed, 4 dead, 5 cancelled): %s", n, counts)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killFigures is what one kill did.
type killFigures struct {
	host      string
	sent      time.Time // SIGKILL sent (DB clock)
	holders   int       // slots the process held when killed
	reclaimed time.Duration
	ok        bool // every one of its slots was reclaimed in time
}

// killWorker SIGKILLs the live worker process that holds the most slots, starts its replacement
// and waits until every slot it held has been reclaimed.
func (r *run) killWorker(threshold time.Duration) killFigures {
	held := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	rows, err := r.pool.Query(ctx, `
SELECT e.host_name, count(*) FROM taskling.task_execution e
WHERE e.token_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)
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
		return killFigures{}
	}
	signal(victim, syscall.SIGKILL)
	sent := r.nem.Now()
	<-victim.done
	dead := r.nem.Now()
	r.mu.Lock()
	r.kills[victim.host], r.killSignal[victim.host] = dead, sent
	r.mu.Unlock()
	r.replace(victim)
	k := killFigures{host: victim.host, sent: sent, holders: held[victim.host]}
	deadline := time.Now().Add(threshold + 5*time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var open int
		err := r.pool.QueryRow(ctx, `SELECT count(*) FROM taskling.task_execution e
WHERE e.host_name = $1 AND e.token_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)`, victim.host).Scan(&open)
		cancel()
		if err == nil && open == 0 {
			k.reclaimed, k.ok = r.nem.Now().Sub(sent), true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = r.nem.Write(ledger.Event{Kind: ledger.KindFault, Fault: fKill, Host: victim.host, At: sent, End: dead,
		Note: fmt.Sprintf("%d slots held; all reclaimed after %s: %v", k.holders, k.reclaimed.Round(time.Millisecond), k.ok)})
	r.logf("fault %s %s: %d slots held, all reclaimed after %s (%v)", fKill, victim.host, k.holders, k.reclaimed.Round(time.Millisecond), k.ok)
	return k
}

// readSubmissions reads every submission of app with its attempts.
func readSubmissions(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app string) []checker.SubmissionState {
	rows, err := pool.Query(ctx, `
SELECT s.id, d.task_name, s.status, s.attempts, s.max_attempts, coalesce(s.execution_id, 0),
       coalesce(array_agg(a.attempt ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}'),
       coalesce(array_agg(a.execution_id ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}')
FROM taskling.submission s JOIN taskling.task_definition d ON d.id = s.task_id
LEFT JOIN taskling.submission_attempt a ON a.submission_id = s.id
WHERE d.application_name = $1
GROUP BY s.id, d.task_name
ORDER BY s.id`, app)
	require.NoError(t, err)
	defer rows.Close()
	names := map[int16]string{1: "waiting", 2: "in_progress", 3: "completed", 4: "dead", 5: "cancelled"}
	var out []checker.SubmissionState
	for rows.Next() {
		var s checker.SubmissionState
		var status int16
		var attempts []int32
		var execs []int64
		require.NoError(t, rows.Scan(&s.ID, &s.Task, &status, &s.Attempts, &s.MaxAttempts, &s.ExecutionID, &attempts, &execs))
		s.Status = names[status]
		for i := range attempts {
			s.Runs = append(s.Runs, checker.AttemptRun{Attempt: int(attempts[i]), Exec: execs[i]})
		}
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// printSubmissionFigures prints the run's figures.
func printSubmissionFigures(t *testing.T, prof submissionProfile, h checker.History, rep checker.Report, kills []killFigures,
	snapshots int, wall, took time.Duration) {
	attempts, retried, failedFirst := 0, 0, 0
	completed := 0
	linked := map[int64]bool{}
	for _, s := range h.Submissions {
		attempts += len(s.Runs)
		if s.Attempts > 1 {
			retried++
		}
		if prof.failEvery > 0 && s.ID%prof.failEvery == 0 {
			failedFirst++
		}
		if s.Status == "completed" {
			completed++
		}
		for _, a := range s.Runs {
			linked[a.Exec] = true
		}
	}
	runs, lost := 0, 0
	for _, hd := range h.Holds {
		if hd.Submission != 0 {
			runs++
			if hd.Reason == ledger.ReasonLeaseLost {
				lost++
			}
		}
	}
	unlinked := 0
	for _, g := range h.Grants {
		if g.Task == subTask && g.Host != "sweeper" && !linked[g.Exec] {
			unlinked++
		}
	}
	// Per kill: the reclaim latency of each slot the killed process held (SIGKILL → reclaim).
	var lat []time.Duration
	for _, g := range h.Grants {
		for _, k := range kills {
			if g.Host == k.host && !g.ReclaimedAt.IsZero() && g.GrantedAt.Before(k.sent) {
				lat = append(lat, g.ReclaimedAt.Sub(k.sent))
			}
		}
	}
	slices.Sort(lat)
	var b strings.Builder
	fmt.Fprintf(&b, "\nsubmissions chaos run (%s profile): %d processes × Work(Workers: %d) on one task at limit %d, threshold %s, heartbeat %s, %s in all\n",
		prof.name, prof.procs, prof.workers, prof.limit, prof.threshold, prof.interval, took.Round(time.Second))
	fmt.Fprintf(&b, "  %-40s %d (+2 duplicate-reference submits: same id)\n", "submissions", len(h.Submissions))
	fmt.Fprintf(&b, "  %-40s %d\n", "completed", completed)
	fmt.Fprintf(&b, "  %-40s %d (database), %d (ledgers)\n", "attempts run", attempts, runs)
	fmt.Fprintf(&b, "  %-40s %d (first attempt failed on purpose: %d)\n", "submissions with attempts > 1", retried, failedFirst)
	fmt.Fprintf(&b, "  %-40s %d\n", "attempts that lost their lease", lost)
	fmt.Fprintf(&b, "  %-40s %d\n", "grants that ran nothing (claim taken)", unlinked)
	fmt.Fprintf(&b, "  %-40s %s\n", "wall time (first worker → all completed)", wall.Round(time.Millisecond))
	fmt.Fprintf(&b, "  %-40s %.0f attempts/s, %.0f completions/s\n", "throughput", float64(attempts)/wall.Seconds(), float64(completed)/wall.Seconds())
	fmt.Fprintf(&b, "  %-40s %d (limit %d)\n", "most holders at once", rep.MaxHolders[subTask], prof.limit)
	for _, k := range kills {
		fmt.Fprintf(&b, "  %-40s %s held %d slots; all reclaimed %s after the SIGKILL (%v)\n", "kill -9", k.host, k.holders, k.reclaimed.Round(time.Millisecond), k.ok)
	}
	if len(lat) > 0 {
		fmt.Fprintf(&b, "  %-40s min %s, p50 %s, max %s (n=%d)\n", "reclaim latency after kill -9", lat[0].Round(time.Millisecond),
			lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat))
	}
	fmt.Fprintf(&b, "  %-40s %d snapshots; %d waits judged, %d offered overtaken, %d requeued, %d displaced by a higher priority\n", "queue order (g)",
		snapshots, sum(rep.QueueJudged), sum(rep.Skipped), sum(rep.Requeued), sum(rep.Displaced))
	fmt.Fprintf(&b, "  %-40s %d\n", "violations", len(rep.Violations))
	t.Log(b.String())
	fmt.Println(b.String())
}

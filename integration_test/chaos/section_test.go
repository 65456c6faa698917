package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/checker"
	"github.com/taskling-go/taskling/integration_test/ledger"
)

// sectionProfile sizes TestChaosCriticalSection.
type sectionProfile struct {
	name                        string
	procs, g, limit             int // worker processes × goroutines, on one task of this limit
	duration                    time.Duration
	kills                       int
	hold                        time.Duration // longest hold of the section
	interval, threshold         time.Duration
	sectionTimeout, tinyTimeout time.Duration // of most waits; the longest of every fourth goroutine's
	handoffBound                time.Duration // check (m3)
}

func chosenSectionProfile() sectionProfile {
	// The handoff bound is below the offer window (the client's poll interval, 250 ms, + 1 s):
	// a waiter that gave up and stayed at the head of the queue would hold the next one for that
	// long.
	p := sectionProfile{name: "short", procs: 4, g: 4, limit: 16, duration: 12 * time.Second, kills: 2, hold: 8 * time.Millisecond,
		interval: 200 * time.Millisecond, threshold: time.Second, sectionTimeout: 10 * time.Second, tinyTimeout: 30 * time.Millisecond,
		handoffBound: 750 * time.Millisecond}
	if os.Getenv("TASKLING_CHAOS") == "long" {
		p.name, p.duration, p.kills = "long", 3*time.Minute, 12
	}
	return p
}

// offerWindow is how long an offer of a slot waits to be taken: the workers' MaxPollInterval
// (250 ms) + 1 s (StartOptions.WaitForSlot).
const offerWindow = 1250 * time.Millisecond

// sectionOwnerTask is the task whose critical section TestChaosCriticalSection takes.
const sectionOwnerTask = "cs"

// TestChaosCriticalSection runs executions that take their task's critical section in several
// worker processes (each goroutine: start an execution, wait for the section with a timeout —
// a tiny one for every fourth goroutine —, hold it a few milliseconds, release it), SIGKILLs a
// process while one of its goroutines holds the section (a replacement starts each time), and
// checks with package checker that no two held the section at once, that waiters were served in
// the order they queued across processes (the section task's queue observed every 10 ms), that a
// waiter that gave up did not hold the next one, and that a killed holder's section was taken
// again within the threshold + 250 ms.
func TestChaosCriticalSection(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test skipped in -short mode")
	}
	prof := chosenSectionProfile()
	sectionTask := sectionOwnerTask + taskling.SectionSuffix
	began := time.Now()
	ctx := context.Background()
	env := newChaosEnv(t, ctx)
	ledgers, bin, srv, dbURL, pool, nem := env.ledgers, env.bin, env.srv, env.dbURL, env.pool, env.nem
	var err error

	qw, err := ledger.Create(filepath.Join(ledgers, "queues.jsonl"))
	require.NoError(t, err)
	defer qw.Close()
	qctx, stopQueues := context.WithCancel(ctx)
	defer stopQueues()
	snapshots := make(chan int, 1)
	go func() { snapshots <- watchQueues(qctx, pool, app, qw, 10*time.Millisecond) }()

	spec := workerSpec{bin: bin, dbURL: dbURL, dir: ledgers, tasks: fmt.Sprintf("%s=%d", sectionOwnerTask, prof.limit), g: prof.g,
		interval: prof.interval, threshold: prof.threshold, sameClock: srv.cluster != nil,
		extra: []string{"-section", "-hold", prof.hold.String(), "-step", "1ms", "-section-timeout", prof.sectionTimeout.String(),
			"-tiny-timeout", prof.tinyTimeout.String()}}
	r := &run{t: t, spec: spec, srv: srv, pool: pool, nem: nem,
		counts: map[string]int{}, kills: map[string]time.Time{}, killSignal: map[string]time.Time{}}
	for slot := range prof.procs {
		r.procs = append(r.procs, startProc(t, spec, slot, 0, nil))
	}
	defer r.killAll()
	workStart := time.Now()

	var kills []sectionKill
	for k := 1; k <= prof.kills; k++ {
		time.Sleep(time.Until(workStart.Add(prof.duration * time.Duration(k) / time.Duration(prof.kills+1))))
		kills = append(kills, r.killSectionHolder(sectionTask, prof.threshold))
	}
	time.Sleep(time.Until(workStart.Add(prof.duration)))
	r.stopAll()
	stopQueues()
	nSnapshots := <-snapshots

	h := checker.History{
		InitialLimit: map[string]int{sectionOwnerTask: prof.limit, sectionTask: 1},
		Kills:        r.kills,
		LeaseTTL:     prof.threshold - prof.threshold*taskling.DefaultSafetyMarginPercent/100,
		Grace:        2 * prof.interval,
	}
	h.Before = taskStates(t, ctx, pool, app)
	limits := map[string]int{sectionOwnerTask: prof.limit}
	sweep(t, ctx, pool, app, ledgers, srv.cluster != nil, prof.interval, prof.threshold, limits, limits)
	sweepSection(t, ctx, pool, ledgers, srv.cluster != nil, prof, sectionTask)
	h.After = taskStates(t, ctx, pool, app)
	h.Grants = readGrants(t, ctx, pool, app)
	lh := readLedgers(t, ledgers)
	h.Queues = lh.queues
	owners := readSectionOwners(t, ctx, pool, app, sectionTask)
	sectionHolds, waits := readSectionLedgers(t, ledgers, sectionTask, owners, h.Grants)
	h.Holds = append(lh.holds, sectionHolds...)
	h.Section = &checker.SectionRun{Task: sectionTask, OwnerTask: sectionOwnerTask, Owners: owners, Waits: waits, KillSent: r.killSignal,
		TakeoverBound: prof.threshold + 250*time.Millisecond, HandoffBound: prof.handoffBound,
		DeadTicketLife: prof.threshold + offerWindow}
	rep := checker.Check(h)

	printSectionFigures(t, prof, sectionTask, h, rep, kills, nSnapshots, time.Since(began))
	if len(kills) < prof.kills {
		t.Errorf("%d kills of %d", len(kills), prof.kills)
	}
	if rep.Section.TimedOut == 0 {
		t.Errorf("chaos harness (not a verdict on the system): no wait for the section timed out: the tiny timeouts were not exercised")
	}
	for _, v := range rep.Violations {
		t.Errorf("violation %s", v)
	}
	if t.Failed() || os.Getenv("TASKLING_CHAOS_KEEP") != "" {
		t.Logf("ledgers kept in %s", keep(t, ledgers))
	}
}

// sectionKill is what one kill of a section holder did.
type sectionKill struct {
	host     string
	owner    int64         // the execution whose section the killed goroutine held
	sent     time.Time     // SIGKILL sent (DB clock)
	takeover time.Duration // until the next grant of the section, as the harness saw it
	ok       bool
}

// killSectionHolder has a random ready worker process take the section and hold it (SIGUSR1:
// it prints "holding <execution>" once it does), SIGKILLs it then, starts its replacement and
// waits until someone else is granted the section.
func (r *run) killSectionHolder(sectionTask string, threshold time.Duration) sectionKill {
	r.mu.Lock()
	var ready []*proc
	for _, p := range r.procs {
		select {
		case <-p.ready:
			if p.alive() {
				ready = append(ready, p)
			}
		default:
		}
	}
	r.mu.Unlock()
	if len(ready) == 0 {
		r.t.Errorf("no ready worker process to kill")
		return sectionKill{}
	}
	p := ready[rand.IntN(len(ready))]
	for drained := false; !drained; {
		select {
		case <-p.lines:
		default:
			drained = true
		}
	}
	signal(p, syscall.SIGUSR1)
	k := sectionKill{host: p.host}
	timeout := time.After(15 * time.Second)
	for k.owner == 0 {
		select {
		case line := <-p.lines:
			if s, ok := strings.CutPrefix(line, "holding "); ok {
				k.owner, _ = strconv.ParseInt(s, 10, 64)
			}
		case <-p.done:
			r.t.Errorf("worker %s exited before it held the section\n%s", p.host, p.stderr.String())
			return k
		case <-timeout:
			r.t.Errorf("worker %s did not take the section within 15s", p.host)
			return k
		}
	}
	k.sent = r.killProc(p, fmt.Sprintf("held the section for execution %d", k.owner))
	deadline := time.Now().Add(threshold + 3*time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var next *time.Time
		err := r.pool.QueryRow(ctx, `SELECT min(e.started_at) FROM taskling.task_execution e JOIN taskling.task_definition d ON d.id = e.task_id
WHERE d.application_name = $1 AND d.task_name = $2 AND e.token_id IS NOT NULL AND e.started_at > $3`, app, sectionTask, k.sent).Scan(&next)
		cancel()
		if err == nil && next != nil {
			k.takeover, k.ok = next.Sub(k.sent), true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.logf("fault %s %s: held the section for execution %d; taken again %s after the SIGKILL (%v)", fKill, p.host, k.owner,
		k.takeover.Round(time.Millisecond), k.ok)
	return k
}

// sweepSection takes the section once more, with a client of its own, once every dead holder is
// past its threshold (sweep waited for that): a section leaked by a holder or a waiter makes it
// fail. It records its execution and the section in the ledger sweeper-section.jsonl of dir,
// like a worker.
func sweepSection(t *testing.T, ctx context.Context, pool *pgxpool.Pool, dir string, sameClock bool, prof sectionProfile, sectionTask string) {
	sw, err := ledger.Create(filepath.Join(dir, "sweeper-section.jsonl"))
	require.NoError(t, err)
	defer sw.Close()
	require.NoError(t, measure(ctx, pool, sw, sameClock))
	c, err := taskling.NewClient(pool, &taskling.Config{HostName: "sweeper",
		Defaults: taskling.TaskSettings{KeepAliveInterval: prof.interval, KeepAliveDeathThreshold: prof.threshold},
		Settings: taskling.StaticSettings{app + "/" + sectionOwnerTask: {ConcurrencyLimit: prof.limit}}})
	require.NoError(t, err)
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*prof.threshold)
	e, err := c.StartExecution(sctx, app, sectionOwnerTask, &taskling.StartOptions{WaitForSlot: true})
	returned := time.Now()
	cancel()
	if err != nil {
		t.Errorf("(c) the sweep could not take a slot of %s: %v", sectionOwnerTask, err)
		return
	}
	ev := func(kind ledger.Kind) ledger.Event {
		return ledger.Event{Kind: kind, Host: "sweeper", At: sw.Now(), Exec: e.ID(), Task: sectionOwnerTask}
	}
	g := ev(ledger.KindGrant)
	g.At, g.Fence, g.GrantedAt = sw.DBTime(returned), e.FencingToken(), e.StartedAt()
	_ = sw.Write(g)
	w := ev(ledger.KindSectionWait)
	w.Timeout = 2 * prof.threshold
	_ = sw.Write(w)
	s, err := e.CriticalSection(ctx, 2*prof.threshold)
	if err != nil {
		gu := ev(ledger.KindSectionGiveUp)
		gu.Result, gu.Error = ledger.ResultError, err.Error()
		_ = sw.Write(gu)
		t.Errorf("(c) the sweep could not take the critical section of %s: %v (a leaked section)", sectionOwnerTask, err)
	} else {
		_ = sw.Write(ev(ledger.KindSectionAcquire))
		st := ev(ledger.KindSectionStop)
		st.Reason = ledger.ReasonCompleted
		_ = sw.Write(st)
		rel := ev(ledger.KindSectionRelease)
		rel.Result = ledger.ResultOK
		if err := s.Release(ctx); err != nil {
			rel.Result, rel.Error = ledger.ResultError, err.Error()
			t.Errorf("sweep: release the section: %v", err)
		}
		rel.At = sw.Now()
		_ = sw.Write(rel)
	}
	stop := ev(ledger.KindStop)
	stop.Reason = ledger.ReasonCompleted
	_ = sw.Write(stop)
	res := ledger.ResultOK
	if err := e.Complete(ctx); err != nil {
		res = ledger.ResultError
		t.Errorf("sweep: complete: %v", err)
	}
	done := ev(ledger.KindComplete)
	done.Result = res
	_ = sw.Write(done)
}

// readSectionOwners maps every granted execution of app's section task to its owner, the
// execution its reference value names.
func readSectionOwners(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app, sectionTask string) map[int64]int64 {
	rows, err := pool.Query(ctx, `
SELECT e.id, coalesce(e.reference_value, '') FROM taskling.task_execution e JOIN taskling.task_definition d ON d.id = e.task_id
WHERE d.application_name = $1 AND d.task_name = $2 AND e.token_id IS NOT NULL`, app, sectionTask)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var id int64
		var ref string
		require.NoError(t, rows.Scan(&id, &ref))
		var owner int64
		if _, err := fmt.Sscanf(ref, "execution %d", &owner); err != nil {
			t.Errorf("section execution %d: reference value %q names no owner", id, ref)
			continue
		}
		out[id] = owner
	}
	require.NoError(t, rows.Err())
	return out
}

// readSectionLedgers reads the section events of the ledgers of dir: the waits, and the holds of
// the section (each the hold of the section execution the database granted to its owner; an
// acquisition with no such grant is left to check m, which reports it).
func readSectionLedgers(t *testing.T, dir, sectionTask string, owners map[int64]int64, grants []checker.Grant) ([]checker.Hold, []checker.SectionWait) {
	evs, err := ledger.ReadDir(dir)
	require.NoError(t, err)
	sectionOf := map[int64]int64{} // owner → its (single) section execution
	for sec, owner := range owners {
		if _, dup := sectionOf[owner]; dup {
			sectionOf[owner] = -1 // ambiguous: check m reports it
			continue
		}
		sectionOf[owner] = sec
	}
	fence := map[int64]int64{}
	for _, g := range grants {
		fence[g.Exec] = g.Fence
	}
	var waits []checker.SectionWait
	last := map[int64]int{}            // owner → index of its last wait
	holds := map[int64]*checker.Hold{} // owner → its hold of the section
	var order []int64
	for _, e := range evs {
		switch e.Kind {
		case ledger.KindSectionWait:
			last[e.Exec] = len(waits)
			waits = append(waits, checker.SectionWait{Owner: e.Exec, Host: e.Host, RequestedAt: e.At, Timeout: e.Timeout})
		case ledger.KindSectionAcquire, ledger.KindSectionGiveUp:
			i, ok := last[e.Exec]
			if !ok {
				t.Errorf("ledger: %s of execution %d on %s without a wait", e.Kind, e.Exec, e.Host)
				continue
			}
			w := &waits[i]
			w.At, w.Outcome, w.Error = e.At, e.Result, e.Error
			w.NotLimitReached = e.Note == ledger.NoteNotLimitReached
			if e.Kind == ledger.KindSectionGiveUp {
				continue
			}
			w.Outcome = checker.SectionAcquired
			sec := sectionOf[e.Exec]
			if sec <= 0 {
				continue
			}
			if _, dup := holds[e.Exec]; dup {
				continue // check m reports a second acquisition
			}
			holds[e.Exec] = &checker.Hold{Exec: sec, Task: sectionTask, Host: e.Host, Fence: fence[sec], ReturnedAt: e.At}
			order = append(order, e.Exec)
		case ledger.KindSectionStop:
			if hd := holds[e.Exec]; hd != nil {
				hd.StopAt, hd.Reason, hd.Observed = e.At, e.Reason, e.Observed
			}
		case ledger.KindSectionRelease:
			if hd := holds[e.Exec]; hd != nil {
				hd.Result = e.Result
			}
		}
	}
	out := make([]checker.Hold, 0, len(order))
	for _, o := range order {
		out = append(out, *holds[o])
	}
	return out, waits
}

// printSectionFigures prints the run's figures.
func printSectionFigures(t *testing.T, prof sectionProfile, sectionTask string, h checker.History, rep checker.Report, kills []sectionKill,
	snapshots int, took time.Duration) {
	f := rep.Section
	tiny, normal := 0, 0
	for _, w := range h.Section.Waits {
		if w.Outcome == ledger.SectionTimeout {
			if w.Timeout <= prof.tinyTimeout {
				tiny++
			} else {
				normal++
			}
		}
	}
	lost := 0
	for _, hd := range h.Holds {
		if hd.Task == sectionTask && hd.Reason == ledger.ReasonLeaseLost {
			lost++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\ncritical section chaos run (%s profile): %d processes × %d goroutines on one task at limit %d, %s, threshold %s, heartbeat %s, %s in all\n",
		prof.name, prof.procs, prof.g, prof.limit, prof.duration, prof.threshold, prof.interval, took.Round(time.Second))
	fmt.Fprintf(&b, "  %-40s %d\n", "executions of "+sectionOwnerTask+" granted", grantsOfTask(h, sectionOwnerTask))
	fmt.Fprintf(&b, "  %-40s %d (acquisitions in the ledgers: %d; most holders at once: %d)\n", "section grants", f.Grants, f.Acquired, rep.MaxHolders[sectionTask])
	fmt.Fprintf(&b, "  %-40s %d (tiny timeouts ≤ %s: %d, others: %d; error not wrapping ErrLimitReached: %d)\n", "waits timed out",
		f.TimedOut, prof.tinyTimeout, tiny, normal, f.TimedOutNotLimit)
	fmt.Fprintf(&b, "  %-40s %d\n", "holders that lost the section", lost)
	if g := slices.Sorted(slices.Values(f.Gaps)); len(g) > 0 {
		fmt.Fprintf(&b, "  %-40s p50 %s, p99 %s, max %s (n=%d; bound %s)\n", "handoff gap (release → next grant)", g[len(g)/2].Round(time.Millisecond),
			g[min(len(g)-1, len(g)*99/100)].Round(time.Millisecond), g[len(g)-1].Round(time.Millisecond), len(g), prof.handoffBound)
	}
	fmt.Fprintf(&b, "  %-40s %d (not judged, a killed process's waiter ahead: %d)\n", "handoffs behind a waiter that gave up", f.BehindTimeout, f.Excused)
	for _, k := range kills {
		fmt.Fprintf(&b, "  %-40s %s held the section (execution %d); taken again after %s (%v)\n", "kill -9", k.host, k.owner, k.takeover.Round(time.Millisecond), k.ok)
	}
	if l := slices.Sorted(slices.Values(f.Takeovers)); len(l) > 0 {
		fmt.Fprintf(&b, "  %-40s min %s, max %s (n=%d; bound threshold + 250 ms = %s)\n", "takeover after kill -9 (check m4)", l[0].Round(time.Millisecond),
			l[len(l)-1].Round(time.Millisecond), len(l), h.Section.TakeoverBound)
	}
	fmt.Fprintf(&b, "  %-40s %d snapshots; %d waits judged, %d offered overtaken, %d requeued, %d displaced\n", "section queue order (g)",
		snapshots, rep.QueueJudged[sectionTask], rep.Skipped[sectionTask], rep.Requeued[sectionTask], rep.Displaced[sectionTask])
	fmt.Fprintf(&b, "  %-40s %d\n", "violations", len(rep.Violations))
	t.Log(b.String())
	fmt.Println(b.String())
}

func grantsOfTask(h checker.History, task string) int {
	n := 0
	for _, g := range h.Grants {
		if g.Task == task {
			n++
		}
	}
	return n
}

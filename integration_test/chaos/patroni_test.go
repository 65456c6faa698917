package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/checker"
)

// The Patroni tests run the failover tests' workers — 3 processes × 4 goroutines on a pool of 3
// and a singleton, plus a process running submissions with Client.Work while the test submits
// one every 200 ms — against three nodes managed by Patroni over a one-member etcd
// (pgcluster.Patroni: ttl 20 s, loop_wait 2 s, retry_timeout 3 s, use_pg_rewind), through the
// multi-host URL of the three servers (target_session_attrs=read-write). Each Patroni reaches
// etcd, and the other nodes reach its server and its Patroni, through toxiproxies of its own.
//
// The nemesis's faults, each right after a grant while holders work:
//
//   - switchover: `patronictl switchover --force` to a replica (the synchronous standby in
//     synchronous mode);
//   - postmaster SIGKILL: every process of the leader's server (Patroni restarts it in place);
//   - leader cut from etcd and the other nodes (clients still reach its server) until another
//     node leads: the old leader demotes itself and stays up read-only, and in asynchronous
//     mode the new leader lacks its last commits; then healed. (Cut from etcd alone, a leader
//     whose replicas still reach its REST API keeps them from a leader race as long as its WAL
//     is ahead of theirs: asynchronous mode then waits for the heal, and loses nothing.)
//   - etcd down for the ttl and 2 s more (no leader: starts fail), then back;
//   - Patroni SIGKILL of the leader, synchronous mode only: its server stays a primary whose
//     commits wait for a standby that another node's promotion took away; its Patroni is back
//     3 s after the new leader (asynchronous mode without a watchdog would be a split brain).
//
// After each fault the nemesis waits for a healthy cluster. Every leader Patroni rewinds leaves
// a copy of its data directory (pgcluster.Patroni.Copies), read afterwards like a killed
// primary of the pair's tests (checker.MergeTimelines), and the checker judges the history:
// checks a–h and s, the epoch rule on every new timeline, and in synchronous mode nothing a
// holder saw lost (checker.History.NoLoss).
//
// make test runs the synchronous smoke profile (one switchover); make chaos runs 5 of each fault
// in each mode. TASKLING_PATRONI_FAULTS (a list of switchover, postmaster, etcd-cut, etcd-down,
// patroni) and TASKLING_PATRONI_ROUNDS choose other faults and rounds.

// patroniProfile sizes a Patroni run.
type patroniProfile struct {
	name                string
	rounds              int      // of each fault
	faults              []string // in the order of each round
	procs, g            int
	interval, threshold time.Duration
	minHold, maxHold    time.Duration
	warm                time.Duration // before the first fault, and once healthy after each
	submitEvery         time.Duration
}

// Fault names, as in the table.
const (
	fSwitchover  = "switchover"
	fPostmaster  = "postmaster SIGKILL"
	fEtcdCut     = "leader cut from etcd"
	fEtcdDown    = "etcd down > ttl"
	fPatroniKill = "leader's Patroni SIGKILL"
)

func chosenPatroniProfile(mode pgcluster.ReplicationMode) patroniProfile {
	p := patroniProfile{name: "smoke", rounds: 1, faults: []string{fSwitchover}, procs: 3, g: 4,
		interval: 200 * time.Millisecond, threshold: 2 * time.Second, minHold: 300 * time.Millisecond, maxHold: 2 * time.Second,
		warm: 2 * time.Second, submitEvery: 200 * time.Millisecond}
	if os.Getenv("TASKLING_CHAOS") == "long" {
		p.name, p.rounds, p.warm = "long", 5, 3*time.Second
		p.faults = []string{fSwitchover, fPostmaster, fEtcdCut, fEtcdDown}
		if mode == pgcluster.Synchronous {
			p.faults = append(p.faults, fPatroniKill)
		}
	}
	// To run some faults only, or fewer rounds, while working on one.
	if list := os.Getenv("TASKLING_PATRONI_FAULTS"); list != "" {
		keys := map[string]string{"switchover": fSwitchover, "postmaster": fPostmaster, "etcd-cut": fEtcdCut, "etcd-down": fEtcdDown, "patroni": fPatroniKill}
		p.faults = nil
		for _, k := range strings.Split(list, ",") {
			if f, ok := keys[k]; ok {
				p.faults = append(p.faults, f)
			}
		}
	}
	if n, err := strconv.Atoi(os.Getenv("TASKLING_PATRONI_ROUNDS")); err == nil && n > 0 {
		p.rounds = n
	}
	return p
}

// The Patroni runs' tasks: the failover runs' two, and the submissions' task.
var patroniTasks = map[string]int{"pool": 3, "singleton": 1, patroniSubTask: 2}

const patroniSubTask = "subs"

// TestChaosPatroniSync runs in strict synchronous mode: the smoke profile in make test, the long
// one in make chaos.
func TestChaosPatroniSync(t *testing.T) {
	testPatroni(t, pgcluster.Synchronous)
}

// TestChaosPatroniAsync runs in asynchronous mode, in make chaos only.
func TestChaosPatroniAsync(t *testing.T) {
	if os.Getenv("TASKLING_CHAOS") != "long" {
		t.Skip("the asynchronous Patroni run is part of make chaos (TASKLING_CHAOS=long)")
	}
	testPatroni(t, pgcluster.Asynchronous)
}

func testPatroni(t *testing.T, mode pgcluster.ReplicationMode) {
	if testing.Short() {
		t.Skip("chaos test skipped in -short mode")
	}
	if os.Getenv("TASKLING_CHAOS") != "long" {
		t.Parallel()
	}
	began := time.Now()
	ctx := context.Background()
	r := newPatroniRun(t, ctx, mode)
	defer r.killAll()
	r.logf("set up in %s", time.Since(began).Round(time.Millisecond))
	time.Sleep(r.pprof.warm)
	for round := range r.pprof.rounds {
		for _, kind := range r.pprof.faults {
			r.inject(ctx, kind, round)
		}
	}
	time.Sleep(r.pprof.warm)
	r.subs.stop()
	completed := r.subs.waitCompleted(ctx, 2*time.Minute)
	r.stopAll()
	r.watch.stop()
	r.logf("workers stopped")
	hist, renamed := r.collect(ctx)
	rep := checker.Check(hist)
	figs := r.figuresOfFaults(hist, rep)
	r.printPatroni(hist, rep, figs, renamed, time.Since(began))
	for i, f := range r.faults {
		// No leader while etcd is down: once back, a leader within the ttl, then one threshold.
		if bound := pgcluster.PatroniTTL + r.pprof.threshold + 5*time.Second; f.kind == fEtcdDown && (figs[i].firstGrant < 0 || figs[i].firstGrant > bound) {
			t.Errorf("etcd down (round %d): first grant %s after etcd's return, want ≤ %s", f.round+1, figs[i].firstGrant, bound)
		}
	}
	if !completed {
		t.Errorf("not every submission completed within 2 minutes of the last fault")
	}
	for _, v := range rep.Violations {
		t.Errorf("violation %s", v)
	}
	if lost := r.subs.lost(t, ctx); len(lost) > 0 && mode == pgcluster.Synchronous {
		t.Errorf("%d submissions whose Submit had returned are missing after the failovers: %v", len(lost), lost)
	}
	if t.Failed() {
		t.Logf("ledgers kept in %s", keep(t, r.spec.dir))
	}
}

// patroniRun is a run against a Patroni cluster: the chaos run's processes and bookkeeping
// (run), the cluster, its proxies, and what the nemesis did.
type patroniRun struct {
	*run
	pprof    patroniProfile
	mode     pgcluster.ReplicationMode
	cluster  *pgcluster.Patroni
	db       string
	watch    *primaryWatch
	subs     *submitter
	client   *taskling.Client // the nemesis's, for the starts it tries while no node leads
	faults   []*patroniFault
	switches []checker.Switch

	pxMu sync.Mutex
	// px are each node's proxies: the one its Patroni reaches etcd through, and those through
	// which the others reach its server and its REST API.
	px map[string][]*toxiproxy.Proxy
}

func newPatroniRun(t *testing.T, ctx context.Context, mode pgcluster.ReplicationMode) *patroniRun {
	pprof := chosenPatroniProfile(mode)
	dir, ledgers, bin := newRunDir(t, "taskling-patroni-")
	pg := filepath.Join(dir, "pg")
	require.NoError(t, os.Mkdir(pg, 0o755))

	r := &patroniRun{pprof: pprof, mode: mode, db: "patroni",
		px: map[string][]*toxiproxy.Proxy{}}
	pxs := newProxies()
	cluster, err := pgcluster.NewPatroni(ctx, &pgcluster.PatroniOptions{Dir: pg, Mode: mode,
		Proxy: func(node, service, addr string) (string, error) {
			px := pxs.add(t, node+"-"+service, addr)
			r.pxMu.Lock()
			defer r.pxMu.Unlock()
			r.px[node] = append(r.px[node], px)
			return px.Listen, nil
		}})
	if errors.Is(err, pgcluster.ErrNoPatroni) || errors.Is(err, pgcluster.ErrNoBinaries) {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %v", err)
		}
		t.Skip(err)
	}
	require.NoError(t, err)
	r.cluster = cluster
	t.Cleanup(func() { keepPatroniLogs(t, cluster); closePatroni(t, cluster) })
	r.watch = watchPrimaries(cluster)
	t.Cleanup(r.watch.stop)

	spec := workerSpec{bin: bin, dbURL: cluster.URL(r.db), dir: ledgers, tasks: failoverTaskSpec, g: pprof.g, interval: pprof.interval,
		threshold: pprof.threshold, sameClock: true,
		extra: []string{"-min-hold", pprof.minHold.String(), "-hold", pprof.maxHold.String()}}
	r.run = openRun(t, ctx, cluster.URL("postgres"), r.db, spec,
		profile{name: pprof.name, procs: pprof.procs, g: pprof.g, interval: pprof.interval, threshold: pprof.threshold})
	r.client, err = taskling.NewClient(r.pool, &taskling.Config{HostName: "nemesis",
		Defaults: taskling.TaskSettings{KeepAliveInterval: pprof.interval, KeepAliveDeathThreshold: pprof.threshold}})
	require.NoError(t, err)
	t.Cleanup(r.client.Close)
	for slot := range pprof.procs {
		r.procs = append(r.procs, startProc(t, spec, slot, 0, nil))
	}
	work := spec
	work.tasks, work.g = fmt.Sprintf("%s=%d", patroniSubTask, patroniTasks[patroniSubTask]), 2
	work.extra = []string{"-work", "-hold", "300ms"}
	r.procs = append(r.procs, startProc(t, work, pprof.procs, 0, nil))
	r.subs = startSubmitter(r.client, r.pool, pprof.submitEvery)
	return r
}

func closePatroni(t *testing.T, p *pgcluster.Patroni) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Logf("close the Patroni cluster: %v", err)
	}
}

// keepPatroniLogs copies the nodes' Patroni logs (with their servers' logs) out when the test
// failed.
func keepPatroniLogs(t *testing.T, p *pgcluster.Patroni) {
	if !t.Failed() {
		return
	}
	dst, err := os.MkdirTemp("", "taskling-patroni-logs-")
	if err != nil {
		return
	}
	for _, n := range p.Nodes() {
		if b, err := os.ReadFile(n.LogFile()); err == nil {
			_ = os.WriteFile(filepath.Join(dst, n.Name+".log"), b, 0o644)
		}
	}
	t.Logf("Patroni logs kept in %s", dst)
}

// collect reads the final primary's task rows and submissions, sweeps every slot, and joins the
// grants of the final primary with those of every copy of a rewound leader and with the
// ledgers. It returns the history and the execution ids handed out again after a failover.
func (r *patroniRun) collect(ctx context.Context) (checker.History, map[checker.GrantKey]int64) {
	t := r.t
	h := checker.History{
		InitialLimit: map[string]int{},
		Kills:        r.kills,
		Outages:      r.outages,
		LeaseTTL:     r.leaseTTL(),
		Grace:        2 * r.pprof.interval,
		Switches:     r.switches,
		NoLoss:       r.mode == pgcluster.Synchronous,
	}
	for task, limit := range patroniTasks {
		h.InitialLimit[task] = limit
	}
	h.Before = taskStates(t, ctx, r.pool, app)
	h.Submissions = readSubmissions(t, ctx, r.pool, app)
	sweep(t, ctx, r.pool, app, r.spec.dir, true, r.pprof.interval, r.pprof.threshold, patroniTasks, patroniTasks)
	h.After = taskStates(t, ctx, r.pool, app)
	final := readGrants(t, ctx, r.pool, app)
	copies, err := r.cluster.Copies()
	require.NoError(t, err)
	var rewound [][]checker.Grant
	for _, c := range copies {
		node, err := r.cluster.Inspect(ctx, c)
		require.NoError(t, err, "start the copy of rewound %s alone", c.Node)
		pool, err := pgxpool.New(ctx, dbURLOf(t, node.URL(), r.db))
		require.NoError(t, err)
		rewound = append(rewound, readGrants(t, ctx, pool, app))
		pool.Close()
		if err := node.StopMode(ctx, pgcluster.StopImmediate); err != nil {
			t.Logf("stop the inspected copy: %v", err)
		}
	}
	r.logf("%d copies of rewound leaders read", len(copies))
	var renamed map[checker.GrantKey]int64
	h.Grants, renamed = checker.MergeTimelines(final, rewound...)
	h.Holds = ledgerFrom(t, readRenamed(t, r.spec.dir, renamed)).holds
	return h, renamed
}

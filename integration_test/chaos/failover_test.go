package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/migrations"

	"github.com/taskling-go/taskling/integration_test/checker"
	"github.com/taskling-go/taskling/integration_test/ledger"
)

// The failover tests run worker processes against a primary with a streaming standby
// (pgcluster.Pair), through the pair's multi-host URL (target_session_attrs=read-write), while
// a nemesis SIGKILLs the primary (every process of it, as if its machine died) right after a
// grant, while holders work and waiters wait, promotes the standby, lets the workers go on
// against it, and rebuilds a standby from it. Every other failover waits past the death
// threshold before the promotion, so every holder must cancel itself (check f). In asynchronous
// mode each failover loses a grant on purpose: the nemesis stops the primary's walsender, waits
// for a grant committed after that and seen by its holder, and kills the primary at once, so the
// promoted standby never had it.
//
// Afterwards the data directory of every killed primary is started alone (Pair.Inspect) to read
// what it had committed: its grants that the surviving primary lacks are the lost ones
// (checker.MergeTimelines), and the checker judges them with the rest (checks a–h).

// failoverProfile sizes a failover run.
type failoverProfile struct {
	name                string
	procs, g            int
	rounds              int           // failovers
	warm, after         time.Duration // before each kill; after each promotion, before the rebuild
	interval, threshold time.Duration
	minHold, maxHold    time.Duration
}

// chosenFailoverProfile: in the short profile (make test) two failovers in synchronous mode (a
// quick one and a slow one) and one, quick, in asynchronous mode; ten each in the long one.
func chosenFailoverProfile(mode pgcluster.ReplicationMode) failoverProfile {
	p := failoverProfile{name: "short", procs: 3, g: 4, rounds: 2, warm: time.Second, after: 2500 * time.Millisecond,
		interval: 200 * time.Millisecond, threshold: 2 * time.Second, minHold: 300 * time.Millisecond, maxHold: 2 * time.Second}
	if mode == pgcluster.Asynchronous {
		p.rounds = 1
	}
	if os.Getenv("TASKLING_CHAOS") == "long" {
		p.name, p.rounds, p.warm, p.after = "long", 10, 3*time.Second, 4*time.Second
	}
	return p
}

// The failover runs' tasks: a pool of 3 and a singleton.
var failoverTasks = map[string]int{"pool": 3, "singleton": 1}

const failoverTaskSpec = "pool=3,singleton=1"

const fFailover = "primary failover"

func TestChaosFailoverSync(t *testing.T) {
	testFailover(t, pgcluster.Synchronous)
}

// TestChaosFailoverAsync loses a grant in every failover. It keeps the limit only with the
// library's rule for a new timeline (fences in a new epoch, no grant for one death threshold).
func TestChaosFailoverAsync(t *testing.T) {
	testFailover(t, pgcluster.Asynchronous)
}

func testFailover(t *testing.T, mode pgcluster.ReplicationMode) {
	if testing.Short() {
		t.Skip("chaos test skipped in -short mode")
	}
	// The two short runs go side by side: each has servers and workers of its own, and mostly
	// waits. The long ones would starve each other on a small machine.
	if os.Getenv("TASKLING_CHAOS") != "long" {
		t.Parallel()
	}
	began := time.Now()
	ctx := context.Background()
	r := newFailoverRun(t, ctx, mode)
	defer r.killAll()
	r.logf("set up in %s", time.Since(began).Round(time.Millisecond))
	time.Sleep(r.fprof.warm)
	for i := range r.fprof.rounds {
		r.failover(ctx, i)
	}
	time.Sleep(r.fprof.warm)
	r.stopAll()
	r.logf("workers stopped")
	hist, renamed := r.collect(ctx)
	rep := checker.Check(hist)
	r.printFailover(hist, rep, renamed, time.Since(began))
	for _, v := range rep.Violations {
		t.Errorf("violation %s", v)
	}
	if n := len(rep.Violations); n > 0 && sum(rep.Lost) > 0 {
		t.Errorf("%d violations after %d grants were lost in a failover: a new primary must neither hand out a fence again nor grant "+
			"a task before the holders of its lost grants are dead (fences in a new epoch, no grant for one death threshold on a new timeline)",
			n, sum(rep.Lost))
	}
	if t.Failed() {
		t.Logf("ledgers kept in %s", keep(t, r.spec.dir))
	}
}

// failoverRun is a run against a pair: the chaos run's processes and bookkeeping (run), the
// pair, and what the nemesis did.
type failoverRun struct {
	*run
	fprof    failoverProfile
	mode     pgcluster.ReplicationMode
	pair     *pgcluster.Pair
	db       string
	switches []checker.Switch
	rounds   []roundNote
}

// roundNote is what the nemesis noted of one failover.
type roundNote struct {
	slow bool
	lost *ledger.Event // async: the grant made while replication was paused, seen by its holder
}

func newFailoverRun(t *testing.T, ctx context.Context, mode pgcluster.ReplicationMode) *failoverRun {
	fprof := chosenFailoverProfile(mode)
	dir, ledgers, bin := newRunDir(t, "taskling-failover-")
	pair, err := pgcluster.NewPair(ctx, &pgcluster.PairOptions{Dir: filepath.Join(dir, "pg"), Mode: mode})
	if errors.Is(err, pgcluster.ErrNoBinaries) || errors.Is(err, pgcluster.ErrNoBasebackup) {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %v", err)
		}
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { keepServerLogs(t, dir); closePair(t, pair) })
	const db = "failover"
	spec := workerSpec{bin: bin, dbURL: pair.URL(db), dir: ledgers, tasks: failoverTaskSpec, g: fprof.g, interval: fprof.interval,
		threshold: fprof.threshold, sameClock: true,
		extra: []string{"-min-hold", fprof.minHold.String(), "-hold", fprof.maxHold.String()}}
	r := &failoverRun{fprof: fprof, mode: mode, pair: pair, db: db,
		run: openRun(t, ctx, pair.URL("postgres"), db, spec, profile{name: fprof.name, procs: fprof.procs, g: fprof.g, interval: fprof.interval, threshold: fprof.threshold})}
	require.NoError(t, pair.WaitCaughtUp(ctx))
	for slot := range fprof.procs {
		r.procs = append(r.procs, startProc(t, spec, slot, 0, nil))
	}
	return r
}

// newRunDir makes the directory of a run against servers of its own, which the postgres OS
// user reaches, with its ledgers/ and the worker binary; it is removed at the end.
func newRunDir(t *testing.T, prefix string) (dir, ledgers, bin string) {
	dir, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres OS user must reach the nodes
	t.Cleanup(func() { os.RemoveAll(dir) })
	ledgers = filepath.Join(dir, "ledgers")
	require.NoError(t, os.Mkdir(ledgers, 0o755))
	return dir, ledgers, buildWorker(t, dir)
}

// openRun creates database db on the primary adminURL reaches, migrates it through spec's URL,
// and returns the run's bookkeeping with the nemesis's pool and ledger (no worker started).
func openRun(t *testing.T, ctx context.Context, adminURL, db string, spec workerSpec, prof profile) *run {
	admin, err := pgx.Connect(ctx, adminURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+db)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	pool, err := pgxpool.New(ctx, spec.dbURL+"&application_name=chaos-nemesis")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.Up(ctx, pool))
	nem, err := ledger.Create(filepath.Join(spec.dir, "nemesis.jsonl"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = nem.Close() })
	return &run{t: t, prof: prof, spec: spec, pool: pool, nem: nem, counts: map[string]int{}, kills: map[string]time.Time{},
		killSignal: map[string]time.Time{}}
}

func closePair(t *testing.T, p *pgcluster.Pair) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Logf("close the pair: %v", err)
	}
}

// keepServerLogs copies the nodes' server logs out of dir when the test failed.
func keepServerLogs(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "pg", "node-*", "postgres.log"))
	if len(logs) == 0 {
		return
	}
	dst, err := os.MkdirTemp("", "taskling-failover-logs-")
	if err != nil {
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(filepath.Dir(l))+".log"), b, 0o644)
		}
	}
	t.Logf("server logs kept in %s", dst)
}

// failover is one round of the nemesis: (async: lose a grant,) kill the primary, (every other
// round: wait past the threshold,) promote the standby, let the workers run, rebuild a standby.
func (r *failoverRun) failover(ctx context.Context, i int) {
	t := r.t
	note := roundNote{slow: i%2 == 1}
	if r.mode == pgcluster.Asynchronous {
		note.lost = r.loseAGrant(ctx)
	} else if r.waitGrant(time.Now(), 5*time.Second) == nil {
		// Kill right after a grant, while its holder works.
		r.logf("no grant within 5 s before the kill")
	}
	killed, err := r.pair.KillPrimary(ctx)
	require.NoError(t, err, "kill the primary")
	if note.slow {
		time.Sleep(r.fprof.threshold + 500*time.Millisecond)
	}
	writable, err := r.pair.Promote(ctx)
	require.NoError(t, err, "promote the standby")
	r.switches = append(r.switches, checker.Switch{Killed: killed, Writable: writable})
	r.rounds = append(r.rounds, note)
	if writable.Sub(killed) >= r.leaseTTL() {
		r.outages = append(r.outages, checker.Window{Start: killed, End: writable, Fault: fFailover})
	}
	desc := fmt.Sprintf("down %s", writable.Sub(killed).Round(time.Millisecond))
	if note.lost != nil {
		desc += fmt.Sprintf("; lost grant: %s exec %d fence %d on %s, granted %s before the kill", note.lost.Task, note.lost.Exec,
			note.lost.Fence, note.lost.Host, killed.Sub(note.lost.GrantedAt).Round(time.Millisecond))
	}
	r.fault(fFailover, "", killed, writable, desc)
	time.Sleep(r.fprof.after)
	if i < r.fprof.rounds-1 {
		require.NoError(t, r.pair.RebuildStandby(ctx), "rebuild the standby")
		require.NoError(t, r.pair.WaitCaughtUp(ctx))
		r.logf("standby rebuilt")
		time.Sleep(r.fprof.warm)
	}
}

// loseAGrant pauses replication and waits for a grant made after the pause and seen by its
// holder: a grant the standby will never receive. It returns that grant's event, nil if none
// came within 5 s.
func (r *failoverRun) loseAGrant(ctx context.Context) *ledger.Event {
	require.NoError(r.t, r.pair.PauseReplication(ctx))
	// started_at is read inside the granting transaction: one after the pause (and a margin for
	// the signal to land) commits after it.
	e := r.waitGrant(time.Now().Add(20*time.Millisecond), 5*time.Second)
	if e == nil {
		r.logf("no grant while replication was paused")
	}
	return e
}

// waitGrant waits up to timeout for a grant made after since and seen by its holder (its ledger
// event, written before any work), and returns its event (nil if none came).
func (r *run) waitGrant(since time.Time, timeout time.Duration) *ledger.Event {
	tail := newLedgerTail(r.spec.dir)
	tail.skip() // what was written before
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, e := range tail.next() {
			if e.Kind == ledger.KindGrant && e.GrantedAt.After(since) {
				return &e
			}
		}
	}
	return nil
}

// dbURLOn is the URL of the run's database on one node (a killed primary started alone).
func (r *failoverRun) dbURLOn(c *pgcluster.Cluster) string {
	return dbURLOf(r.t, c.URL(), r.db)
}

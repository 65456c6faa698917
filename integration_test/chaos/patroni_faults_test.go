package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/checker"
)

// patroniFault is what the nemesis did and saw in one fault.
type patroniFault struct {
	kind  string
	round int
	// injected is when the fault began; from is what "fault → first grant" counts from (etcd
	// down: etcd back).
	injected, from time.Time
	oldLeader      string
	oldTL          int
	newLeader      string
	newTL          int
	// writable: the new timeline's primary accepted writes (a lower bound); seen: the poll that
	// found it writable replied.
	writable, seen time.Time
	did            []string // what Patroni did
	startErr       string   // etcd down: the error of a start tried while no node led
}

// inject makes one fault of kind, records the switch it causes, heals, and waits for a healthy
// cluster.
func (r *patroniRun) inject(ctx context.Context, kind string, round int) {
	t := r.t
	leader, err := r.cluster.Leader(ctx)
	require.NoError(t, err, "a leader before the fault")
	st, err := leader.Status(ctx)
	require.NoError(t, err)
	f := &patroniFault{kind: kind, round: round, oldLeader: leader.Name, oldTL: st.Timeline}
	copiesBefore := r.copies()
	pidBefore := leader.PostmasterPID()
	mark := r.watch.mark()
	if kind != fEtcdDown && r.waitGrant(time.Now(), 5*time.Second) == nil {
		r.logf("no grant within 5 s before the fault")
	}
	switch kind {
	case fSwitchover:
		f.injected = time.Now()
		require.NoError(t, r.cluster.Switchover(ctx, leader, r.candidate(ctx, leader)))
	case fPostmaster:
		f.injected, err = leader.KillPostmaster(ctx)
		require.NoError(t, err)
	case fEtcdCut:
		f.injected = r.cut(leader.Name)
	case fEtcdDown:
		r.etcdDown(ctx, f)
	case fPatroniKill:
		f.injected, err = leader.KillPatroni()
		require.NoError(t, err)
	}
	if f.from.IsZero() {
		f.from = f.injected
	}
	tr, ok := r.watch.waitTimeline(mark, f.oldTL, pgcluster.PatroniTTL+time.Minute)
	if !ok {
		t.Errorf("%s (round %d): no node writable on a timeline after %d within %s", kind, round+1, f.oldTL, pgcluster.PatroniTTL+time.Minute)
	}
	f.newLeader, f.newTL, f.writable, f.seen = tr.node, tr.to.tl, tr.prevSent, tr.got
	switch kind {
	case fEtcdCut:
		r.heal(leader.Name)
	case fPatroniKill:
		// A supervisor brings Patroni back late: a demotion, then a rewind.
		time.Sleep(3 * time.Second)
		require.NoError(t, leader.StartPatroni())
	}
	r.settle(ctx, f)
	r.recordSwitch(f, leader.Name)
	f.did = r.whatPatroniDid(f, pidBefore, leader, copiesBefore)
	r.faults = append(r.faults, f)
	r.fault(kind, f.oldLeader, f.injected, f.seen, strings.Join(f.did, "; "))
	r.logf("%s (round %d): %s", kind, round+1, strings.Join(f.did, "; "))
	time.Sleep(r.pprof.warm)
}

// candidate is the switchover's target: the synchronous standby in synchronous mode (the only
// one Patroni accepts), else the replica after the leader in the nodes' order.
func (r *patroniRun) candidate(ctx context.Context, leader *pgcluster.PatroniNode) *pgcluster.PatroniNode {
	nodes := r.cluster.Nodes()
	var after *pgcluster.PatroniNode
	for i, n := range nodes {
		if n == leader {
			after = nodes[(i+1)%len(nodes)]
		}
		if st, err := n.Status(ctx); err == nil && st.SyncStandby && r.mode == pgcluster.Synchronous {
			return n
		}
	}
	return after
}

// cut blackholes the Patroni of node from etcd and closes the other nodes' ways to it
// (replication, REST API): it demotes itself once it cannot renew its lock, the others elect a
// leader once the lock expired. Clients still reach its server.
func (r *patroniRun) cut(node string) time.Time {
	r.pxMu.Lock()
	pxs := r.px[node]
	r.pxMu.Unlock()
	for _, px := range pxs {
		if px.Name == node+"-etcd" {
			require.NoError(r.t, addToxic(px, "bh_up", "timeout", "upstream", `{"timeout":0}`))
			require.NoError(r.t, addToxic(px, "bh_down", "timeout", "downstream", `{"timeout":0}`))
		} else {
			px.Stop() // its links reset: a walsender exits at once, and a shutdown does not wait for it
		}
	}
	return time.Now()
}

func (r *patroniRun) heal(node string) {
	r.pxMu.Lock()
	pxs := r.px[node]
	r.pxMu.Unlock()
	for _, px := range pxs {
		if px.Name == node+"-etcd" {
			removeToxics(px)
		} else {
			require.NoError(r.t, px.Start())
		}
	}
}

// etcdDown kills etcd, waits until no node is writable, tries a start, and brings etcd back
// when it has been down for the ttl and 2 s more.
func (r *patroniRun) etcdDown(ctx context.Context, f *patroniFault) {
	var err error
	f.injected, err = r.cluster.StopEtcd()
	require.NoError(r.t, err)
	deadline := time.Now().Add(pgcluster.PatroniTTL)
	for r.watch.writableNode() != "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.watch.writableNode(); n != "" {
		r.t.Errorf("etcd down: %s still writable after %s", n, pgcluster.PatroniTTL)
	} else {
		// The error says the database is read-only, and names each server and why it refused.
		err := r.startWhileNoLeader(ctx)
		if err != nil {
			f.startErr = err.Error()
		}
		if !errors.Is(err, taskling.ErrDatabaseReadOnly) || !strings.Contains(f.startErr, "read only connection") {
			r.t.Errorf("etcd down: a start while no node led failed with an unclear error: %v", err)
		}
	}
	time.Sleep(time.Until(f.injected.Add(pgcluster.PatroniTTL + 2*time.Second)))
	f.from = time.Now()
	require.NoError(r.t, r.cluster.StartEtcd(ctx))
}

// startWhileNoLeader tries starts for 2 s while no node accepts writes, and returns the error
// of the last (the first ones may meet connections the demotion closes); nil if one succeeded.
func (r *patroniRun) startWhileNoLeader(ctx context.Context) error {
	var last error
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		e, err := r.client.StartExecution(sctx, app, "pool", nil)
		cancel()
		if err == nil {
			r.t.Errorf("etcd down: a start succeeded while no node was writable (exec %d)", e.ID())
			_ = e.Complete(ctx)
			return nil
		}
		last = err
	}
	return last
}

// settle waits for a healthy cluster; a node left out (a rewind that failed) is reinitialized.
func (r *patroniRun) settle(ctx context.Context, f *patroniFault) {
	err := r.cluster.WaitHealthy(ctx, 2*time.Minute)
	if err == nil {
		return
	}
	r.logf("%s: not healthy after 2 minutes: %v", f.kind, err)
	for _, n := range r.cluster.Nodes() {
		st, serr := n.Status(ctx)
		if serr == nil && (st.Leader || st.State == "running") {
			continue
		}
		out, rerr := r.cluster.Patronictl(ctx, "reinit", "taskling", n.Name, "--force")
		r.logf("patronictl reinit %s: %v: %s", n.Name, rerr, out)
		f.did = append(f.did, "reinit "+n.Name)
	}
	require.NoError(r.t, r.cluster.WaitHealthy(ctx, 3*time.Minute), "a healthy cluster after %s", f.kind)
}

// recordSwitch adds the fault's switch: Killed is when the old leader stopped accepting commits
// on its timeline (or the new primary was found writable, if sooner: a primary whose commits
// wait for a standby promoted since commits nothing more). An outage of a lease or more is
// recorded for check (f).
func (r *patroniRun) recordSwitch(f *patroniFault, old string) {
	if f.newTL == 0 {
		return
	}
	killed := f.seen
	if stopped, ok := r.watch.stopped(old, f.oldTL); ok && stopped.Before(killed) {
		killed = stopped
	}
	r.switches = append(r.switches, checker.Switch{Killed: killed, Writable: f.writable, Timeline: f.newTL})
	if f.writable.Sub(killed) >= r.leaseTTL() {
		r.outages = append(r.outages, checker.Window{Start: killed, End: f.writable, Fault: f.kind})
	}
}

// whatPatroniDid describes the fault's outcome: who leads on which timeline, whether the old
// leader's server restarted, which nodes were rewound.
func (r *patroniRun) whatPatroniDid(f *patroniFault, pidBefore int, old *pgcluster.PatroniNode, copiesBefore int) []string {
	var did []string
	switch {
	case f.newTL == 0:
		did = append(did, "no new timeline")
	case f.newLeader == f.oldLeader:
		did = append(did, fmt.Sprintf("%s stays leader, timeline %d → %d", f.oldLeader, f.oldTL, f.newTL))
	default:
		did = append(did, fmt.Sprintf("failover %s → %s, timeline %d → %d", f.oldLeader, f.newLeader, f.oldTL, f.newTL))
	}
	if pid := old.PostmasterPID(); pid != pidBefore {
		did = append(did, fmt.Sprintf("%s's server restarted", f.oldLeader))
	}
	copies, err := r.cluster.Copies()
	require.NoError(r.t, err)
	for _, c := range copies[min(copiesBefore, len(copies)):] {
		did = append(did, "rewound "+c.Node)
	}
	if f.startErr != "" {
		did = append(did, "a start while no node led: "+f.startErr)
	}
	if f.seen.IsZero() {
		return did
	}
	return append(did, fmt.Sprintf("down %s", f.seen.Sub(f.injected).Round(time.Millisecond)))
}

func (r *patroniRun) copies() int {
	c, err := r.cluster.Copies()
	require.NoError(r.t, err)
	return len(c)
}

// dbURLOf is url (a node's, of its "postgres" database) naming database db.
func dbURLOf(t *testing.T, u, db string) string {
	p, err := url.Parse(u)
	require.NoError(t, err)
	p.Path = "/" + db
	return p.String()
}

// submitter submits to the Patroni runs' submissions task at a steady pace, each with a
// reference of its own, and keeps what Submit returned.
type submitter struct {
	cancel context.CancelFunc
	done   chan struct{}
	pool   *pgxpool.Pool

	mu     sync.Mutex
	acked  map[string]int64 // reference → id
	failed int
}

func startSubmitter(c *taskling.Client, pool *pgxpool.Pool, every time.Duration) *submitter {
	ctx, cancel := context.WithCancel(context.Background())
	s := &submitter{cancel: cancel, done: make(chan struct{}), pool: pool, acked: map[string]int64{}}
	go func() {
		defer close(s.done)
		for i := 0; ctx.Err() == nil; i++ {
			ref := fmt.Sprintf("p-%d", i)
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			id, err := c.Submit(sctx, app, patroniSubTask, &taskling.SubmitOptions{ReferenceValue: ref, MaxAttempts: taskling.MaxMaxAttempts})
			cancel()
			s.mu.Lock()
			if err == nil {
				s.acked[ref] = id
			} else {
				s.failed++
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return s
}

func (s *submitter) stop() {
	s.cancel()
	<-s.done
}

// waitCompleted waits up to timeout until no submission is left unfinished.
func (s *submitter) waitCompleted(ctx context.Context, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var open int
		err := s.pool.QueryRow(qctx, `SELECT count(*) FROM taskling.submission WHERE status IN (1, 2)`).Scan(&open)
		cancel()
		if err == nil && open == 0 {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// lost lists the references whose Submit returned and which the database lacks.
func (s *submitter) lost(t *testing.T, ctx context.Context) []string {
	rows, err := s.pool.Query(ctx, `SELECT reference_value FROM taskling.submission WHERE reference_value IS NOT NULL`)
	require.NoError(t, err)
	have := map[string]bool{}
	for rows.Next() {
		var ref string
		require.NoError(t, rows.Scan(&ref))
		have[ref] = true
	}
	require.NoError(t, rows.Err())
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for ref := range s.acked {
		if !have[ref] {
			out = append(out, ref)
		}
	}
	sort.Strings(out)
	return out
}

package taskling_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/taskling"
)

// The short chaos profile behind pgbouncer: 4 processes (clients with pools of their own, two
// listening on a direct connection, two polling) × 3 goroutines hold and request slots of a
// singleton everyone waits for and of a task of limit 2 started without waiting, while a
// nemesis kills pgbouncer (SIGKILL, back after 200 ms or after longer than the death threshold),
// terminates every server connection of the database, and kills processes (their heartbeats
// freeze and their holders stop, never completing). Afterwards: never more holders than the
// limit (in the processes and in the database's record), fences strictly increasing and as the
// holders saw them, every grant released or reclaimed, and every grant of a killed process
// reclaimed.

var bouncerChaosTasks = []struct {
	name  string
	limit int
	wait  bool
}{{"singleton", 1, true}, {"pool", 2, false}}

const bouncerChaosApp = "app"

// taskLimits is a SettingsSource: fast liveness, the limit per task.
type taskLimits map[string]int

func (l taskLimits) TaskSettings(_ context.Context, _, task string) (taskling.TaskSettings, error) {
	s := fast
	s.ConcurrencyLimit = l[task]
	return s, nil
}

// chaosHold is one grant as its holder saw it: from StartExecution's return to the last instant
// it worked (before Complete, or when it saw its context cancelled, or when its process died).
type chaosHold struct {
	task        string
	exec, fence int64
	from, to    time.Time
	killed      bool // its process was killed while it held: it never completed
}

type chaosProc struct {
	client *taskling.Client
	cancel context.CancelFunc
	killed atomic.Bool
	wg     sync.WaitGroup
}

type bouncerChaos struct {
	t        *testing.T
	x        *bounced
	nemesis  *pgxpool.Pool // direct, application_name nemesis: spared by the terminations
	restarts sync.Mutex    // serializes the nemesis's and the supervisor's restarts of pgbouncer
	mu       sync.Mutex
	holds    []chaosHold
	faults   map[string]int
	procs    []*chaosProc
	started  int // processes started so far, for their names
}

func TestPgBouncerChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test skipped in -short mode")
	}
	t.Parallel()
	x := newBounced(t)
	nemesis, err := pgxpool.New(x.ctx, x.dbURL+"&application_name=nemesis")
	require.NoError(t, err)
	t.Cleanup(nemesis.Close)
	r := &bouncerChaos{t: t, x: x, nemesis: nemesis, faults: map[string]int{}}
	for range 4 {
		r.startProc()
	}
	stopSupervisor := r.supervise()
	faults := []func(){r.bouncerKill(200 * time.Millisecond), r.bouncerKill(1300 * time.Millisecond), r.terminate, r.killProc}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for range 2 { // each fault twice, in random order, 600 ms apart
		for _, i := range rnd.Perm(len(faults)) {
			time.Sleep(600 * time.Millisecond)
			faults[i]()
		}
	}
	r.mu.Lock()
	procs := r.procs
	r.mu.Unlock()
	for _, p := range procs {
		p.cancel()
		p.wg.Wait()
	}
	r.sweep()
	stopSupervisor()
	r.check()
}

func (r *bouncerChaos) startProc() {
	r.mu.Lock()
	r.started++
	n := r.started
	r.mu.Unlock()
	c := r.x.client(r.t, fmt.Sprint("proc", n), n%2 == 0, 0, taskling.Config{Settings: taskLimits{"singleton": 1, "pool": 2}, MaxPollInterval: 250 * time.Millisecond})
	ctx, cancel := context.WithCancel(r.x.ctx)
	p := &chaosProc{client: c, cancel: cancel}
	for g := range 3 {
		p.wg.Go(func() { r.work(ctx, p, g) })
	}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
}

// work is one goroutine of a process: start (waiting, for the singleton), hold 2–17 ms while the
// context lasts and the process lives, complete; again.
func (r *bouncerChaos) work(ctx context.Context, p *chaosProc, g int) {
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g)))
	tk := bouncerChaosTasks[min(g, 1)] // one waiter for the singleton, two on the pool
	for ctx.Err() == nil {
		e, err := p.client.StartExecution(ctx, bouncerChaosApp, tk.name, &taskling.StartOptions{WaitForSlot: tk.wait})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, taskling.ErrLimitReached) && !execution.IsConnectionError(err) {
				r.t.Errorf("start %s: %v", tk.name, err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		h := chaosHold{task: tk.name, exec: e.ID(), fence: e.FencingToken(), from: time.Now()}
		h.to = h.from
		for end := h.from.Add(2*time.Millisecond + time.Duration(rnd.Int64N(int64(15*time.Millisecond)))); time.Now().Before(end); {
			if p.killed.Load() {
				e.StopHeartbeatForTest() // the process froze for good: no heartbeat, no Complete
				h.killed = true
				break
			}
			if e.Context().Err() != nil {
				break
			}
			h.to = time.Now()
			time.Sleep(time.Millisecond)
		}
		r.mu.Lock()
		r.holds = append(r.holds, h)
		r.mu.Unlock()
		if h.killed {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = e.Complete(cctx)
		cancel()
		if err != nil && !errors.Is(err, taskling.ErrLeaseLost) && !execution.IsConnectionError(err) {
			r.t.Errorf("complete %s: %v", tk.name, err)
		}
	}
}

func (r *bouncerChaos) fault(name string) {
	r.mu.Lock()
	r.faults[name]++
	r.mu.Unlock()
}

// supervise restarts pgbouncer when it exits on its own, as a service manager would: 1.18 does,
// now and then, when a client closes its connection in the middle of a query
// ("server_proto: server in bad state: 11", PgBouncer issue 822, fixed in 1.20.1).
func (r *bouncerChaos) supervise() (stop func()) {
	ctx, cancel := context.WithCancel(r.x.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			r.restarts.Lock()
			if !r.x.bouncer.Running() {
				r.t.Logf("pgbouncer exited on its own; restarting it")
				r.fault("pgbouncer exited on its own")
				if err := r.x.bouncer.Restart(ctx, 0); err != nil && ctx.Err() == nil {
					r.t.Errorf("restart pgbouncer: %v", err)
				}
			}
			r.restarts.Unlock()
		}
	}()
	return func() { cancel(); <-done }
}

// bouncerKill: SIGKILL pgbouncer, start it again on its port after down.
func (r *bouncerChaos) bouncerKill(down time.Duration) func() {
	return func() {
		ctx, cancel := context.WithTimeout(r.x.ctx, time.Minute)
		defer cancel()
		r.restarts.Lock()
		defer r.restarts.Unlock()
		if err := r.x.bouncer.Restart(ctx, down); err != nil {
			r.t.Fatalf("restart pgbouncer: %v", err)
		}
		r.fault(fmt.Sprintf("pgbouncer kill -9, down %s", down))
	}
}

// terminate: pg_terminate_backend of every other connection to the database: pgbouncer's server
// connections (in a transaction or idle) and the direct listeners.
func (r *bouncerChaos) terminate() {
	var n int
	err := r.nemesis.QueryRow(r.x.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'nemesis'`).Scan(&n)
	if err != nil {
		r.t.Errorf("terminate: %v", err)
		return
	}
	r.fault("pg_terminate_backend")
}

// killProc kills the process holding the singleton if one does (else the first): its holders
// freeze and stop, its waiters give up; a new process takes its place.
func (r *bouncerChaos) killProc() {
	var holder string
	_ = r.nemesis.QueryRow(r.x.ctx, `SELECT e.host_name FROM taskling.task_execution e
WHERE e.token_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)
ORDER BY e.id DESC LIMIT 1`).Scan(&holder)
	r.mu.Lock()
	victim := 0
	for i, p := range r.procs {
		if p.client.HostName() == holder {
			victim = i
		}
	}
	p := r.procs[victim]
	r.procs = slices.Delete(r.procs, victim, victim+1)
	r.mu.Unlock()
	p.killed.Store(true)
	p.cancel()
	p.wg.Wait()
	p.client.Close()
	r.fault("process killed")
	r.startProc()
}

// sweep takes every slot of every task at once (waiting past the dead holders' threshold), so
// that every grant of a killed process is reclaimed, then returns them.
func (r *bouncerChaos) sweep() {
	c := r.x.client(r.t, "sweeper", true, 0, taskling.Config{Settings: taskLimits{"singleton": 1, "pool": 2}})
	ctx, cancel := context.WithTimeout(r.x.ctx, 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var execs []*taskling.Execution
	var mu sync.Mutex
	for _, tk := range bouncerChaosTasks {
		for range tk.limit {
			wg.Go(func() {
				e, err := c.StartExecution(ctx, bouncerChaosApp, tk.name, &taskling.StartOptions{WaitForSlot: true})
				if err != nil {
					r.t.Errorf("sweep %s: %v", tk.name, err)
					return
				}
				mu.Lock()
				execs = append(execs, e)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for _, e := range execs {
		require.NoError(r.t, e.Complete(ctx))
	}
}

func (r *bouncerChaos) check() {
	t := r.t
	most, badFences := grantsOverLimit(t, r.nemesis)
	var grants, open, killedNotReclaimed, fenceMismatch int
	require.NoError(t, r.nemesis.QueryRow(r.x.ctx, `SELECT count(*), count(*) FILTER (WHERE x.execution_id IS NULL)
FROM taskling.task_execution e LEFT JOIN taskling.execution_end x ON x.execution_id = e.id WHERE e.token_id IS NOT NULL`).Scan(&grants, &open))
	byTask := map[string][]chaosHold{}
	for _, h := range r.holds {
		byTask[h.task] = append(byTask[h.task], h)
		var fence int64
		var outcome *int16
		require.NoError(t, r.nemesis.QueryRow(r.x.ctx, `SELECT e.fence, x.outcome FROM taskling.task_execution e
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id WHERE e.id = $1`, h.exec).Scan(&fence, &outcome))
		if fence != h.fence {
			fenceMismatch++
		}
		if h.killed && (outcome == nil || *outcome != 3) {
			killedNotReclaimed++
		}
	}
	t.Logf("faults %v; %d grants (%d seen by holders); most holders at once in the database %v", r.faults, grants, len(r.holds), most)
	for _, tk := range bouncerChaosTasks {
		require.LessOrEqual(t, most[tk.name], tk.limit, "database record of %s", tk.name)
		require.LessOrEqual(t, mostAtOnce(byTask[tk.name]), tk.limit, "holders of %s", tk.name)
	}
	require.Zero(t, badFences, "fences not strictly increasing")
	require.Zero(t, fenceMismatch, "holders saw another fence than the one recorded")
	require.Zero(t, open, "grants neither released nor reclaimed")
	require.Zero(t, killedNotReclaimed, "grants of killed processes not reclaimed")
	require.GreaterOrEqual(t, len(r.holds), 10, "too few grants to judge")
	for _, f := range []string{"pgbouncer kill -9, down 200ms", "pgbouncer kill -9, down 1.3s", "pg_terminate_backend", "process killed"} {
		require.Positive(t, r.faults[f], "fault %q never ran", f)
	}
}

// mostAtOnce is the most holds overlapping at one instant (one ending as another starts do
// not overlap).
func mostAtOnce(holds []chaosHold) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, h := range holds {
		edges = append(edges, edge{h.from, 1}, edge{h.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

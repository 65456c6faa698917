package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/freeport"
	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/tokens"

	"github.com/taskling-go/taskling/integration_test/checker"
	"github.com/taskling-go/taskling/integration_test/ledger"
)

// server is the PostgreSQL server of a run: a private cluster of the test's own, which the
// nemesis may restart, or (no server binaries) the one in TASKLING_DATABASE_URL, which it may not.
type server struct {
	url     string
	cluster *pgcluster.Cluster // nil: foreign server, no restarts
	why     string             // why restarts are off
}

// startServer starts a private cluster in a directory of its own. The repository's shared
// cluster (.taskling/pg) is not used: restarting it with pg_ctl stop -m immediate would break the
// tests of everyone else using it at the same time.
func startServer(t *testing.T, ctx context.Context) *server {
	dir, err := os.MkdirTemp("", "taskling-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	// The postgres OS user must reach the cluster's directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := pgcluster.Ensure(ctx, &pgcluster.Options{Dir: filepath.Join(dir, "pg")})
	if errors.Is(err, pgcluster.ErrNoBinaries) {
		u := os.Getenv(pgcluster.EnvDatabaseURL)
		if u == "" {
			t.Skip("no PostgreSQL server binaries and no TASKLING_DATABASE_URL")
		}
		why := "PostgreSQL server binaries not found: using TASKLING_DATABASE_URL, a server this test cannot restart"
		t.Log("chaos: restart fault skipped: " + why)
		return &server{url: u, why: why}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs after the stop below and before the directory goes: a failed run keeps the
		// server's log.
		if !t.Failed() {
			return
		}
		if b, err := os.ReadFile(c.LogFile()); err == nil {
			if f, err := os.CreateTemp("", "taskling-chaos-postgres-*.log"); err == nil {
				_, _ = f.Write(b)
				_ = f.Close()
				t.Logf("server log kept in %s", f.Name())
			}
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Logf("stop the chaos cluster: %v", err)
		}
	})
	favourServer(t, c)
	return &server{url: c.URL(), cluster: c}
}

// serverNice is the scheduling priority the chaos server runs at when the test may set it (as
// root). On a 2-core machine shared with 8 worker processes and a make test (load 12-19), the
// postmaster got ~5 % of a core and forked ~6 backends a second; the workers' reconnections after
// a restart then kept its accept queue full (780 of 844) and no start was granted for minutes. A
// database server has cores of its own in any fleet this models.
const serverNice = -5

// favourServer runs c's postmaster, and so each backend it forks from now on, at serverNice, if
// the test may (it says once if not).
func favourServer(t testing.TB, c *pgcluster.Cluster) {
	pid, ok := c.PostmasterPID()
	if !ok {
		return
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, pid, serverNice); err != nil {
		favourOnce.Do(func() { t.Logf("chaos: the server runs at the workers' priority (setpriority: %v)", err) })
	}
}

var favourOnce sync.Once

// proxies is the in-process toxiproxy: one proxy per worker slot, so one process can be cut off.
type proxies struct {
	srv *toxiproxy.ApiServer
	mu  sync.Mutex
	all []*toxiproxy.Proxy
}

func newProxies() *proxies {
	return &proxies{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

func (p *proxies) add(t *testing.T, name, upstream string) *toxiproxy.Proxy {
	// Not "127.0.0.1:0": a proxy cut (Stop) and healed (Start) binds its port again, which an
	// outgoing connection may have taken meanwhile if it were ephemeral.
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	px := toxiproxy.NewProxy(p.srv, name, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), upstream)
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.all = append(p.all, px)
	p.mu.Unlock()
	t.Cleanup(px.Stop)
	return px
}

func addToxic(px *toxiproxy.Proxy, name, typ, stream string, attrs string) error {
	_, err := px.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)))
	return err
}

func removeToxics(px *toxiproxy.Proxy) {
	px.Toxics.ResetToxics(context.Background())
}

// proxyURL is dbURL with its host and port replaced by the proxy's.
func proxyURL(dbURL, addr string) string {
	// URLs made by pgcluster and pgtest are postgres://user@host:port/db?...
	at := strings.Index(dbURL, "@")
	slash := strings.Index(dbURL[at:], "/")
	return dbURL[:at+1] + addr + dbURL[at+slash:]
}

// proc is one worker process.
type proc struct {
	slot   int
	host   string
	ledger string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	proxy  *toxiproxy.Proxy
	stderr *bytes.Buffer
	// ready is closed when the worker prints "ready" on stdout (the -blocks and -section modes,
	// once their client is up); lines receives its other lines (dropped when nobody reads).
	ready chan struct{}
	lines chan string
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

type workerSpec struct {
	bin, dbURL, dir, tasks string
	g                      int
	interval, threshold    time.Duration
	// sameClock: the server runs on this host and reads the same clock, so ledger times need no
	// offset (a measured one is noise: at worst half a round trip under load).
	sameClock bool
	// extra are more flags for the worker (-work, -hold, …).
	extra []string
}

// startProc starts the worker of slot; through px, or straight to the database if px is nil.
func startProc(t *testing.T, spec workerSpec, slot, incarnation int, px *toxiproxy.Proxy) *proc {
	host := fmt.Sprintf("w%d-%d", slot, incarnation)
	p := &proc{slot: slot, host: host, ledger: filepath.Join(spec.dir, host+".jsonl"), done: make(chan struct{}), proxy: px, stderr: &bytes.Buffer{},
		ready: make(chan struct{}), lines: make(chan string, 16)}
	dbURL := spec.dbURL
	if px != nil {
		dbURL = proxyURL(spec.dbURL, px.Listen)
	}
	args := []string{"-ledger", p.ledger, "-host", host,
		"-tasks", spec.tasks, "-g", fmt.Sprint(spec.g), "-interval", spec.interval.String(), "-threshold", spec.threshold.String(),
		fmt.Sprintf("-same-clock=%v", spec.sameClock)}
	p.cmd = exec.Command(spec.bin, append(args, spec.extra...)...)
	p.cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+dbURL) // not on the command line: anyone may read that
	p.cmd.Stderr = &lockedWriter{w: p.stderr}
	p.cmd.Stdout = &lineWriter{p: p}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.cmd.Process.Pid)); err == nil {
		testutil.RequireNoDatabaseURL(t, dbURL, []string{string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))})
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 1<<20 {
		return len(b), nil
	}
	return l.w.Write(b)
}

// lineWriter splits a worker's stdout into lines for its proc: "ready" closes ready, the others
// go to lines. Only the goroutine exec starts to copy stdout writes to it.
type lineWriter struct {
	p       *proc
	partial []byte
	isReady bool
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		switch {
		case line == "ready" && !l.isReady:
			l.isReady = true
			close(l.p.ready)
		default:
			select {
			case l.p.lines <- line:
			default:
			}
		}
	}
}

// killProc SIGKILLs p, waits for it to die, records the kill (r.kills: when it was dead;
// r.killSignal: when the signal was sent) and starts its replacement; it returns when the
// signal was sent (DB clock).
func (r *run) killProc(p *proc, note string) time.Time {
	signal(p, syscall.SIGKILL)
	sent := r.nem.Now()
	<-p.done
	dead := r.nem.Now()
	r.mu.Lock()
	r.kills[p.host], r.killSignal[p.host] = dead, sent
	r.mu.Unlock()
	r.replace(p)
	_ = r.nem.Write(ledger.Event{Kind: ledger.KindFault, Fault: fKill, Host: p.host, At: sent, End: dead, Note: note})
	r.count(fKill)
	return sent
}

// ledgerTail reads what the ledgers of a directory gained since its last call.
type ledgerTail struct {
	dir  string
	read map[string]int64 // file → bytes consumed (whole lines)
}

func newLedgerTail(dir string) *ledgerTail { return &ledgerTail{dir: dir, read: map[string]int64{}} }

func (l *ledgerTail) skip() { l.next() }

// next reads each file from where the last call stopped: a line is written by one write(2), and
// a torn last one (its writer killed mid-write) is read again next time.
func (l *ledgerTail) next() []ledger.Event {
	paths, _ := filepath.Glob(filepath.Join(l.dir, "*.jsonl"))
	var out []ledger.Event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.NewSectionReader(f, l.read[p], 1<<40))
		f.Close()
		end := 0
		for i, c := range b {
			if c != '\n' {
				continue
			}
			if e, ok := parseEvent(b[end:i]); ok {
				out = append(out, e)
			}
			end = i + 1
		}
		l.read[p] += int64(end)
	}
	return out
}

func parseEvent(line []byte) (ledger.Event, bool) {
	var e ledger.Event
	return e, json.Unmarshal(line, &e) == nil
}

// waitStopped waits until the kernel shows pid stopped (state T) after a SIGSTOP.
func waitStopped(pid int) {
	for range 200 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && (s[i+2] == 'T' || s[i+2] == 't') {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func signal(p *proc, sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// measure sets w's offset to the DB clock, unless the server shares our clock.
func measure(ctx context.Context, pool *pgxpool.Pool, w *ledger.Writer, sameClock bool) error {
	if sameClock {
		return nil
	}
	off, _, err := ledger.MeasureOffset(ctx, func(ctx context.Context) (time.Time, error) {
		var t time.Time
		err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t)
		return t, err
	}, 7)
	if err != nil {
		return err
	}
	w.SetOffset(off)
	return nil
}

// newDatabase makes the run's migrated database on the server.
func newDatabase(t *testing.T, ctx context.Context, serverURL string) string {
	db, err := pgtest.CreateDatabase(ctx, serverURL, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = db.Drop(ctx)
	})
	return db.URL
}

// buildWorker builds cmd/chaosworker into dir.
func buildWorker(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "chaosworker")
	build := exec.Command("go", "build", "-o", bin, "github.com/taskling-go/taskling/integration_test/cmd/chaosworker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the worker: %v\n%s", err, out)
	}
	return bin
}

// watchQueues is the queue observer of check (g): until ctx ends, it reads the queue column and
// fence of every task of app every interval, in one statement, and writes each change to w
// (ledger.KindQueue, on the DB clock). It returns how many snapshots it wrote. Reads that fail
// (a server restart) are skipped, and the next one waits a little.
func watchQueues(ctx context.Context, pool *pgxpool.Pool, app string, w *ledger.Writer, every time.Duration) int {
	type state struct {
		fence int64
		queue string
	}
	last := map[string]state{}
	n := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rows, err := pool.Query(qctx, `SELECT task_name, fence, queue, clock_timestamp() FROM taskling.task_definition WHERE application_name = $1`, app)
		if err != nil {
			cancel()
			// The server is away (a restart): do not add a connection attempt every few
			// milliseconds to the storm of reconnecting workers.
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		var evs []ledger.Event
		for rows.Next() {
			var e ledger.Event
			if rows.Scan(&e.Task, &e.Fence, &e.Queue, &e.At) != nil {
				continue
			}
			if st := (state{e.Fence, e.Queue}); last[e.Task] != st {
				last[e.Task] = st
				e.Kind = ledger.KindQueue
				evs = append(evs, e)
			}
		}
		rows.Close()
		cancel()
		for _, e := range evs {
			if w.Write(e) == nil {
				n++
			}
		}
	}
}

// readGrants reads every execution of app granted a slot, with its end.
func readGrants(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app string) []checker.Grant {
	grants, err := queryGrants(ctx, pool, app, nil)
	if err != nil {
		t.Fatal(err)
	}
	return grants
}

// queryGrants is readGrants, returning its error, of the executions execs only unless nil.
func queryGrants(ctx context.Context, pool *pgxpool.Pool, app string, execs []int64) ([]checker.Grant, error) {
	rows, err := pool.Query(ctx, `
SELECT e.id, d.task_name, e.host_name, e.fence, e.started_at,
       CASE WHEN x.outcome IN (1, 2) THEN x.ended_at END, CASE WHEN x.outcome = 3 THEN x.ended_at END,
       coalesce(x.last_heartbeat, greatest(e.started_at, s.last_heartbeat), e.started_at), e.keep_alive_death_threshold,
       coalesce(x.outcome = 2, false), coalesce(e.session_id, 0), coalesce((e.header->>'p')::int, 0), e.key, e.cost
FROM taskling.task_execution e JOIN taskling.task_definition d ON d.id = e.task_id
LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
LEFT JOIN taskling.session s ON s.id = e.session_id
WHERE d.application_name = $1 AND e.token_id IS NOT NULL AND ($2::bigint[] IS NULL OR e.id = ANY ($2))`, app, execs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []checker.Grant
	for rows.Next() {
		var g checker.Grant
		var completed, reclaimed *time.Time
		if err := rows.Scan(&g.Exec, &g.Task, &g.Host, &g.Fence, &g.GrantedAt, &completed, &reclaimed, &g.LastKeepAlive, &g.Threshold,
			&g.Failed, &g.Session, &g.Priority, &g.Key, &g.Cost); err != nil {
			return nil, err
		}
		if completed != nil {
			g.CompletedAt = *completed
		}
		if reclaimed != nil {
			g.ReclaimedAt = *reclaimed
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// ledgerHistory is what the ledgers of a run say.
type ledgerHistory struct {
	holds     []checker.Hold
	queues    []checker.QueueSnapshot
	maxOffset time.Duration // largest |offset| a worker measured to the DB clock
}

// readLedgers reads the ledgers of dir: the holders (in the order of their grants) and the queue
// snapshots.
func readLedgers(t *testing.T, dir string) ledgerHistory {
	evs, err := ledger.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ledgerFrom(t, evs)
}

// ledgerFrom is what the events of the ledgers say (readLedgers).
func ledgerFrom(t *testing.T, evs []ledger.Event) ledgerHistory {
	var lh ledgerHistory
	holds := map[int64]*checker.Hold{}
	var order []int64
	for _, e := range evs {
		switch e.Kind {
		case ledger.KindGrant:
			if _, dup := holds[e.Exec]; dup {
				t.Errorf("ledger: exec %d granted twice", e.Exec)
				continue
			}
			holds[e.Exec] = &checker.Hold{Exec: e.Exec, Task: e.Task, Host: e.Host, Fence: e.Fence, ReturnedAt: e.At,
				Submission: e.Submission, Attempt: e.Attempt, GrantedAt: e.GrantedAt, Waited: e.Waited, Key: e.Key, Cost: e.Cost}
			order = append(order, e.Exec)
		case ledger.KindStop:
			if hd := holds[e.Exec]; hd != nil {
				hd.StopAt, hd.Reason, hd.Observed = e.At, e.Reason, e.Observed
			}
		case ledger.KindComplete:
			if hd := holds[e.Exec]; hd != nil {
				hd.Result = e.Result
			}
		case ledger.KindStart:
			if d := max(e.Offset, -e.Offset); d > lh.maxOffset {
				lh.maxOffset = d
			}
		case ledger.KindQueue:
			tickets, err := checker.ParseQueue(e.Queue)
			if err != nil {
				t.Errorf("(g) task %s: queue read at %s: %v", e.Task, e.At, err)
				continue
			}
			lh.queues = append(lh.queues, checker.QueueSnapshot{Task: e.Task, At: e.At, Fence: e.Fence, Tickets: tickets})
		}
	}
	for _, id := range order {
		lh.holds = append(lh.holds, *holds[id])
	}
	return lh
}

// sweep takes every slot of every task of app (limits: task → its limit now) with a client of
// its own (declaring the limits declared: task → the limit the workers declare), once every dead
// holder is past its threshold, records the grants in the ledger sweeper.jsonl of dir and
// returns the slots: a leaked slot makes it fail (check c).
func sweep(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app, dir string, sameClock bool, interval, threshold time.Duration, limits, declared map[string]int) {
	sweepWith(t, ctx, pool, app, dir, sameClock, interval, threshold, limits, func(task string) taskling.TaskSettings {
		return taskling.TaskSettings{ConcurrencyLimit: declared[task]}
	}, nil)
}

// sweepWith is sweep with the settings the sweeper declares and, if keyOf is not nil, the key of
// its i'th start of each task (a keyed task's sweep spreads its slots over keys with room).
func sweepWith(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app, dir string, sameClock bool, interval, threshold time.Duration,
	limits map[string]int, declared func(task string) taskling.TaskSettings, keyOf func(i int) string) {
	time.Sleep(threshold + 300*time.Millisecond)
	sw, err := ledger.Create(filepath.Join(dir, "sweeper.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if err := measure(ctx, pool, sw, sameClock); err != nil {
		t.Fatal(err)
	}
	sweeper, err := taskling.NewClient(pool, &taskling.Config{HostName: "sweeper",
		Defaults: taskling.TaskSettings{KeepAliveInterval: interval, KeepAliveDeathThreshold: threshold},
		Settings: taskling.SettingsFunc(func(_ context.Context, _, task string) (taskling.TaskSettings, error) {
			return declared(task), nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.Close()
	names := make([]string, 0, len(limits))
	for name := range limits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, task := range names {
		limit := limits[task]
		var held []*taskling.Execution
		for range limit {
			sctx, cancel := context.WithTimeout(ctx, 2*threshold)
			opts := &taskling.StartOptions{WaitForSlot: true}
			if keyOf != nil {
				opts.Key = keyOf(len(held))
			}
			e, err := sweeper.StartExecution(sctx, app, task, opts)
			returned := time.Now()
			cancel()
			if err != nil {
				t.Errorf("(c) the sweep could not take slot %d of %d of %s: %v (a leaked slot)", len(held)+1, limit, task, err)
				break
			}
			_ = sw.Write(ledger.Event{Kind: ledger.KindGrant, Host: "sweeper", At: sw.DBTime(returned), Exec: e.ID(), Task: task, Fence: e.FencingToken(), GrantedAt: e.StartedAt(),
				Key: e.Key(), Cost: e.Cost()})
			held = append(held, e)
		}
		for _, e := range held {
			_ = sw.Write(ledger.Event{Kind: ledger.KindStop, Host: "sweeper", At: sw.Now(), Exec: e.ID(), Task: task, Reason: ledger.ReasonCompleted})
			res := ledger.ResultOK
			if err := e.Complete(ctx); err != nil {
				res = ledger.ResultError
				t.Errorf("sweep: complete: %v", err)
			}
			_ = sw.Write(ledger.Event{Kind: ledger.KindComplete, Host: "sweeper", At: sw.Now(), Exec: e.ID(), Task: task, Result: res})
		}
	}
}

// taskStates reads the task rows of app (check d).
func taskStates(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app string) map[string]checker.TaskState {
	out := map[string]checker.TaskState{}
	rows, err := pool.Query(ctx, `
SELECT d.task_name, d.tokens, d.fence,
       coalesce((SELECT array_agg(e.id) FROM taskling.task_execution e
                 WHERE e.task_id = d.id AND e.token_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taskling.execution_end x WHERE x.execution_id = e.id)), '{}'),
       coalesce((SELECT array_agg(h.exec_id) FROM taskling.handoff h WHERE h.task_id = d.id AND h.lapsed_at IS NULL), '{}'),
       coalesce((SELECT array_agg(h.fence) FROM taskling.handoff h WHERE h.task_id = d.id), '{}')
FROM taskling.task_definition d WHERE d.application_name = $1`, app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, text string
		var st checker.TaskState
		if err := rows.Scan(&name, &text, &st.Fence, &st.Open, &st.Pending, &st.Handed); err != nil {
			t.Fatal(err)
		}
		if st.Tokens, err = tokens.Parse(text); err != nil {
			t.Errorf("(d) task %s: stored token list: %v", name, err)
		}
		out[name] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// chaosEnv is what a multi-process chaos test starts from: a ledger directory, the worker binary,
// the server, a migrated database with the nemesis's pool, and the nemesis's ledger with the
// clock measurement written.
type chaosEnv struct {
	ledgers, bin, dbURL string
	srv                 *server
	pool                *pgxpool.Pool
	nem                 *ledger.Writer
}

func newChaosEnv(t *testing.T, ctx context.Context) chaosEnv {
	t.Helper()
	dir := t.TempDir()
	env := chaosEnv{ledgers: filepath.Join(dir, "ledgers")}
	require.NoError(t, os.Mkdir(env.ledgers, 0o755))
	env.bin = buildWorker(t, dir)
	env.srv = startServer(t, ctx)
	env.dbURL = newDatabase(t, ctx, env.srv.url)
	pool, err := pgxpool.New(ctx, env.dbURL+"&application_name=chaos-nemesis")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	env.pool = pool
	require.NoError(t, migrations.Up(ctx, pool))
	env.nem, err = ledger.Create(filepath.Join(env.ledgers, "nemesis.jsonl"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.nem.Close() })
	require.NoError(t, measure(ctx, pool, env.nem, env.srv.cluster != nil))
	return env
}

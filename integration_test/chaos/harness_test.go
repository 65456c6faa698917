package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/taskling-go/taskling/internal/pgcluster"
	"github.com/taskling-go/taskling/internal/pgtest"

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
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Logf("stop the chaos cluster: %v", err)
		}
	})
	return &server{url: c.URL(), cluster: c}
}

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
	px := toxiproxy.NewProxy(p.srv, name, "127.0.0.1:0", upstream)
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
}

func startProc(t *testing.T, spec workerSpec, slot, incarnation int, px *toxiproxy.Proxy) *proc {
	host := fmt.Sprintf("w%d-%d", slot, incarnation)
	p := &proc{slot: slot, host: host, ledger: filepath.Join(spec.dir, host+".jsonl"), done: make(chan struct{}), proxy: px, stderr: &bytes.Buffer{}}
	p.cmd = exec.Command(spec.bin, "-db", proxyURL(spec.dbURL, px.Listen), "-ledger", p.ledger, "-host", host,
		"-tasks", spec.tasks, "-g", fmt.Sprint(spec.g), "-interval", spec.interval.String(), "-threshold", spec.threshold.String(),
		fmt.Sprintf("-same-clock=%v", spec.sameClock))
	p.cmd.Stderr = &lockedWriter{w: p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
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

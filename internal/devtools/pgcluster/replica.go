package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A Pair is a primary with one streaming standby, built from the same server binaries as the
// private cluster, for failover tests: each node is a Cluster in a directory of its own
// (Dir/node-<n>), the standby made by pg_basebackup -R with a physical replication slot. The two
// nodes listen on two ports fixed for the pair's life; a standby rebuilt after a failover takes
// the port of the primary that died, so URL (both ports, target_session_attrs=read-write) finds
// the current primary through any number of failovers.
//
// Synchronous mode sets synchronous_standby_names = '*' on the primary once its standby
// streams: a commit returns only after the standby flushed it. The setting is made with ALTER
// SYSTEM after the base backup, so a promoted standby does not inherit it and its commits do not
// wait for a standby that does not exist yet (a failover manager such as Patroni does the same);
// between a promotion and RebuildStandby the new primary runs alone. Asynchronous mode leaves the
// setting empty: a commit returns once it is flushed on the primary.
//
//	p, err := pgcluster.NewPair(ctx, &pgcluster.PairOptions{Dir: dir, Mode: pgcluster.Synchronous})
//	defer p.Close(context.Background())
//	pool, err := pgxpool.New(ctx, p.URL("postgres"))
//	killedAt, err := p.KillPrimary(ctx) // SIGKILL of the primary's every process
//	writable, err := p.Promote(ctx)     // the standby accepts writes on return
//	err = p.RebuildStandby(ctx)         // a new standby of the new primary, on the dead one's port
type Pair struct {
	opts     PairOptions
	basebkup string
	ports    [2]int

	mu      sync.Mutex
	primary *Cluster
	standby *Cluster // nil between a promotion and RebuildStandby
	killed  []*Cluster
	started []*Cluster // every node this pair started (Close stops those still running)
	nodes   int        // nodes made so far, for their directory names
	paused  int        // pid of a walsender stopped by PauseReplication, 0 if none
}

// ReplicationMode is how the primary waits for its standby.
type ReplicationMode string

const (
	// Synchronous: synchronous_standby_names = '*' (with synchronous_commit = on, the default):
	// a commit returns after the standby flushed its WAL.
	Synchronous ReplicationMode = "sync"
	// Asynchronous: a commit returns once it is flushed on the primary; the standby may lag.
	Asynchronous ReplicationMode = "async"
)

// PairOptions configure NewPair.
type PairOptions struct {
	// Dir holds the nodes' directories; it must exist and the server's OS user must reach it
	// (not a 0700 t.TempDir when we are root).
	Dir  string
	Mode ReplicationMode
	// SearchPath is as in Options.
	SearchPath []string
}

// ErrNoBasebackup means pg_basebackup was found neither beside pg_ctl nor in Debian's directory
// of the same major version.
var ErrNoBasebackup = errors.New("pgcluster: pg_basebackup not found beside pg_ctl or in /usr/lib/postgresql/<version>/bin; install Debian's postgresql-client package")

// NewPair makes and starts a primary, then a standby streaming from it, and in Synchronous mode
// makes the standby synchronous. Close stops both.
func NewPair(ctx context.Context, opts *PairOptions) (*Pair, error) {
	if opts == nil || opts.Dir == "" {
		return nil, errors.New("pgcluster: NewPair needs a directory")
	}
	if opts.Mode != Synchronous && opts.Mode != Asynchronous {
		return nil, fmt.Errorf("pgcluster: unknown replication mode %q (want %q or %q)", opts.Mode, Synchronous, Asynchronous)
	}
	p := &Pair{opts: *opts}
	primary, err := Ensure(ctx, p.nodeOptions())
	if err != nil {
		return nil, err
	}
	p.primary = primary
	p.started = append(p.started, primary)
	p.ports[0] = primary.Port()
	if p.basebkup, err = findBasebackup(ctx, primary); err != nil {
		p.Close(context.Background())
		return nil, err
	}
	if p.ports[1], err = freePort(); err != nil {
		p.Close(context.Background())
		return nil, err
	}
	if err := p.attachStandby(ctx, p.ports[1]); err != nil {
		p.Close(context.Background())
		return nil, err
	}
	return p, nil
}

func (p *Pair) nodeOptions() *Options {
	o := &Options{Dir: filepath.Join(p.opts.Dir, fmt.Sprintf("node-%d", p.nodes)), SearchPath: p.opts.SearchPath}
	p.nodes++
	return o
}

// findBasebackup looks for pg_basebackup in the directory pg_ctl really lives in (PATH may hold a
// symlink to it), then in Debian's directory of the server's major version.
func findBasebackup(ctx context.Context, c *Cluster) (string, error) {
	dirs := []string{filepath.Dir(c.pgCtl)}
	if real, err := filepath.EvalSymlinks(c.pgCtl); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	if out, err := c.run(ctx, c.pgCtl, "--version"); err == nil {
		if major, err := majorVersion(string(out)); err == nil {
			dirs = append(dirs, filepath.Join(debianRoot, major, "bin"))
		}
	}
	for _, d := range dirs {
		// Debian's /usr/bin/pg_basebackup is a wrapper that picks a version itself: skip it.
		if b := filepath.Join(d, "pg_basebackup"); isExecutable(b) && !isWrapper(b) {
			return b, nil
		}
	}
	return "", ErrNoBasebackup
}

func isWrapper(path string) bool {
	real, err := filepath.EvalSymlinks(path)
	return err == nil && filepath.Base(real) == "pg_wrapper"
}

// URL is the multi-host URL of database db: both ports, the current primary chosen by
// target_session_attrs=read-write, and a connect timeout of 2 s per host (pgx applies it to each
// host in turn; a dead host on 127.0.0.1 refuses at once).
func (p *Pair) URL(db string) string {
	p.mu.Lock()
	pw := p.primary.currentPassword()
	p.mu.Unlock()
	hosts := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.ports[0])) + "," + net.JoinHostPort("127.0.0.1", strconv.Itoa(p.ports[1]))
	u := url.URL{Scheme: "postgres", User: url.UserPassword(superuser, pw), Host: hosts, Path: "/" + db,
		RawQuery: "sslmode=disable&target_session_attrs=read-write&connect_timeout=2"}
	return u.String()
}

// Primary is the current primary (nil after KillPrimary until Promote); Standby the current
// standby (nil after Promote until RebuildStandby). Their URL methods name one node.
func (p *Pair) Primary() *Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.primary
}

func (p *Pair) Standby() *Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.standby
}

// Killed lists the primaries KillPrimary killed, oldest first. Their data directories are kept:
// Inspect starts one alone, to read what it had committed.
func (p *Pair) Killed() []*Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Cluster(nil), p.killed...)
}

// attachStandby makes a standby of the current primary by pg_basebackup, starts it on port, waits
// until it streams, and in Synchronous mode makes it the synchronous standby.
func (p *Pair) attachStandby(ctx context.Context, port int) error {
	p.mu.Lock()
	primary := p.primary
	opts := p.nodeOptions()
	p.mu.Unlock()
	if primary == nil {
		return errors.New("pgcluster: no primary to attach a standby to")
	}
	sb, err := Open(opts)
	if err != nil {
		return err
	}
	name := filepath.Base(sb.dir)
	if err := p.baseBackup(ctx, primary, sb, name); err != nil {
		return err
	}
	sb.setPort(port)
	if err := sb.updateState(func(*state) {}); err != nil {
		return err
	}
	if err := sb.Start(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	p.started = append(p.started, sb)
	p.standby = sb
	p.mu.Unlock()
	if err := waitStreaming(ctx, primary, name, false); err != nil {
		return err
	}
	if p.opts.Mode == Synchronous {
		if err := setSynchronous(ctx, primary, "*"); err != nil {
			return err
		}
		return waitStreaming(ctx, primary, name, true)
	}
	return nil
}

// baseBackup copies primary into sb's data directory with pg_basebackup -R (standby.signal and
// primary_conninfo written), over a new physical replication slot named after the standby.
func (p *Pair) baseBackup(ctx context.Context, primary, sb *Cluster, name string) error {
	pw := primary.currentPassword()
	if err := writeFileNoFollow(sb.pwFile, []byte(pw+"\n"), 0o600); err != nil {
		return err
	}
	sb.mu.Lock()
	sb.password = pw
	sb.mu.Unlock()
	if err := os.RemoveAll(sb.dataDir); err != nil {
		return fmt.Errorf("pgcluster: remove %s: %w", sb.dataDir, err)
	}
	if err := os.Mkdir(sb.dataDir, 0o700); err != nil {
		return fmt.Errorf("pgcluster: create %s: %w", sb.dataDir, err)
	}
	if err := sb.chown(sb.dataDir); err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := p.baseBackupCommand(ctx, primary, sb, name, pw)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgcluster: pg_basebackup from port %d: %w: %s", primary.Port(), err, strings.TrimSpace(out.String()))
	}
	// A standby whose primary died retries its WAL sources every wal_retrieve_retry_interval
	// (5 s by default), and a promotion requested meanwhile waits for the retry: PostgreSQL 15
	// logs "received promote request", then "waiting for WAL to become available" for 5 s.
	return appendConf(filepath.Join(sb.dataDir, "postgresql.auto.conf"), "wal_retrieve_retry_interval = '100ms'")
}

// baseBackupCommand is the pg_basebackup of baseBackup. The password goes in its environment
// (PGPASSWORD), which only its OS user and root can read: on its command line every local user
// would see it in ps. -R still writes it into primary_conninfo, inside the 0700 data directory.
func (p *Pair) baseBackupCommand(ctx context.Context, primary, sb *Cluster, name, pw string) *exec.Cmd {
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", primary.Port(), replicationRole, name)
	slot := strings.ReplaceAll(name, "-", "_")
	cmd := sb.Command(ctx, p.basebkup, "-D", sb.dataDir, "-d", conninfo, "-w", "-R", "-X", "stream", "-c", "fast",
		"-C", "-S", slot, "--no-sync")
	cmd.Env = append(cmd.Env, "PGPASSWORD="+pw)
	return cmd
}

// appendConf appends a line to a configuration file the server's OS user owns (we may be root;
// the file keeps its owner).
func appendConf(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: append to %s: %w", path, err)
	}
	return nil
}

// setSynchronous sets synchronous_standby_names on c (ALTER SYSTEM, then a reload).
func setSynchronous(ctx context.Context, c *Cluster, names string) error {
	return withNode(ctx, c, func(conn *pgx.Conn) error {
		// No parameters in utility statements; names is ours ('*' or '').
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '%s'", names)); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	})
}

// waitStreaming waits until the primary's walsender for the standby named name streams (and,
// with sync, is its synchronous standby).
func waitStreaming(ctx context.Context, primary *Cluster, name string, sync bool) error {
	q := `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`
	if sync {
		q += ` AND sync_state = 'sync'`
	}
	return poll(ctx, readyTimeout, func() (bool, error) {
		var n int
		err := withNode(ctx, primary, func(conn *pgx.Conn) error { return conn.QueryRow(ctx, q, name).Scan(&n) })
		return n == 1, err
	}, "standby "+name+" streaming")
}

// withNode runs f on a new connection to c's "postgres" database.
func withNode(ctx context.Context, c *Cluster, f func(*pgx.Conn) error) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, c.URL()+"&connect_timeout=5")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(conn)
}

// poll calls f every 20 ms until it reports done, ctx ends or timeout passes; what names the
// wait in the error.
func poll(ctx context.Context, timeout time.Duration, f func() (bool, error), what string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: wait for %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops every node the pair started that still runs (immediate mode: the data is
// disposable), including those Inspect started, and resumes a walsender PauseReplication left
// stopped. It returns the first error.
func (p *Pair) Close(ctx context.Context) error {
	p.mu.Lock()
	nodes := append([]*Cluster(nil), p.started...)
	paused := p.paused
	p.paused = 0
	p.mu.Unlock()
	if paused != 0 {
		_ = syscall.Kill(paused, syscall.SIGCONT)
	}
	var errs []error
	for _, c := range nodes {
		if err := c.StopMode(ctx, StopImmediate); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

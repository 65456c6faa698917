package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
)

// Patroni is PostgreSQL as most teams run it highly available: three nodes managed by Patroni
// over a one-member etcd, for failover tests beside the hand-built Pair. Everything lives under
// Dir (etcd/, bin/, copies/, n0/ … n2/, each node's patroni.log holding its server's log too)
// and listens on 127.0.0.1 on ports picked free; Close stops every process it started.
//
// Patroni runs with ttl 20 s, loop_wait 2 s, retry_timeout 3 s, use_pg_rewind and
// maximum_lag_on_failover 1 MiB, without a watchdog; Synchronous mode sets synchronous_mode and
// synchronous_mode_strict (a commit returns once the synchronous standby flushed it, and without
// one commits wait), Asynchronous mode neither. Patroni and PostgreSQL run as the server's OS
// user (the postgres user when we are root), etcd as ourselves.
//
// Before Patroni rewinds a failed leader (pg_rewind, after a failover it did not take part in),
// a copy of that leader's data directory is kept: Patroni's bin_dir is a directory of links to
// the server binaries whose pg_rewind first copies its target into copies/. Copies lists them,
// and Inspect starts one alone, so a test can read what that leader had committed.
//
//	p, err := pgcluster.NewPatroni(ctx, &pgcluster.PatroniOptions{Dir: dir, Mode: pgcluster.Synchronous})
//	defer p.Close(context.Background())
//	pool, err := pgxpool.New(ctx, p.URL("postgres"))
//	leader, err := p.Leader(ctx)
//	err = p.Switchover(ctx, leader, p.Nodes()[1])
type Patroni struct {
	opts       PatroniOptions
	binDir     string // links to the server binaries, and the pg_rewind that keeps a copy
	copiesDir  string
	ctlConfig  string // patronictl's configuration (etcd reached directly)
	patroni    string
	patronictl string
	pgCtl      string
	cred       *syscall.Credential
	password   string // of the superuser and the replication role
	etcd       *etcdServer
	nodes      []*PatroniNode

	mu        sync.Mutex
	inspected []*Cluster
}

// PatroniOptions configure NewPatroni.
type PatroniOptions struct {
	// Dir holds everything; it must exist and the server's OS user must reach it (not a 0700
	// t.TempDir when we are root).
	Dir  string
	Mode ReplicationMode
	// SearchPath is as in Options.
	SearchPath []string
	// Proxy, when set, returns the address through which addr (host:port) is reached: for service
	// "etcd", etcd by the Patroni of node; for "postgres", node's server by the other nodes
	// (streaming, pg_basebackup, pg_rewind); for "api", node's Patroni REST API by the others
	// (the leader race compares the members' WAL positions through it) and by patronictl. The
	// last two are the connect addresses Patroni publishes. A fault proxy, say. Clients (URL),
	// and this package's Status, always go direct. Default: addr.
	Proxy func(node, service, addr string) (string, error)
}

// The Patroni settings of every cluster NewPatroni makes.
const (
	PatroniTTL          = 20 * time.Second
	PatroniLoopWait     = 2 * time.Second
	PatroniRetryTimeout = 3 * time.Second
	// PatroniMaxLagOnFailover is maximum_lag_on_failover: a replica further behind than this
	// (bytes) does not take part in a leader race.
	PatroniMaxLagOnFailover = 1 << 20

	patroniNodes = 3
	patroniScope = "taskling"
)

// ErrNoPatroni means patroni, patronictl or etcd is not installed.
var ErrNoPatroni = errors.New("pgcluster: patroni, patronictl or etcd not found on PATH or in /usr/bin; install Debian's patroni and etcd-server packages")

// PatroniNode is one Patroni-managed PostgreSQL node.
type PatroniNode struct {
	Name    string
	p       *Patroni
	dir     string
	dataDir string
	config  string
	logFile string
	pgPort  int
	apiPort int

	mu     sync.Mutex
	daemon *daemon // its Patroni; nil or exited once killed
}

// NewPatroni starts etcd, then the first node (which bootstraps the cluster), then the two
// others as its replicas, and returns once the cluster is healthy (HealthyErr). Close stops it.
func NewPatroni(ctx context.Context, opts *PatroniOptions) (*Patroni, error) {
	if opts == nil || opts.Dir == "" {
		return nil, errors.New("pgcluster: NewPatroni needs a directory")
	}
	if opts.Mode != Synchronous && opts.Mode != Asynchronous {
		return nil, fmt.Errorf("pgcluster: unknown replication mode %q (want %q or %q)", opts.Mode, Synchronous, Asynchronous)
	}
	p := &Patroni{opts: *opts}
	if err := p.findTools(); err != nil {
		return nil, err
	}
	var err error
	if p.cred, err = serverCredential(); err != nil {
		return nil, err
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("pgcluster: random password: %w", err)
	}
	p.password = hex.EncodeToString(b)
	if err := p.layout(); err != nil {
		return nil, err
	}
	if err := p.start(ctx); err != nil {
		p.Close(context.Background())
		return nil, err
	}
	return p, nil
}

// findTools finds patroni, patronictl, etcd and the server binaries, pg_rewind among them.
func (p *Patroni) findTools() error {
	look := func(name string) string {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
		if isExecutable("/usr/bin/" + name) {
			return "/usr/bin/" + name
		}
		return ""
	}
	p.patroni, p.patronictl = look("patroni"), look("patronictl")
	etcd := look("etcd")
	if p.patroni == "" || p.patronictl == "" || etcd == "" {
		return ErrNoPatroni
	}
	searchPath := p.opts.SearchPath
	if searchPath == nil {
		searchPath = defaultSearchPath()
	}
	_, pgCtl, err := findBinaries(searchPath)
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(pgCtl); err == nil {
		pgCtl = real
	}
	for _, b := range []string{"postgres", "pg_rewind", "pg_basebackup", "pg_controldata", "initdb"} {
		if !isExecutable(filepath.Join(filepath.Dir(pgCtl), b)) {
			return fmt.Errorf("pgcluster: %s not found beside %s; install Debian's postgresql package", b, pgCtl)
		}
	}
	p.pgCtl = pgCtl
	p.etcd = &etcdServer{bin: etcd}
	return nil
}

// layout makes the directories, the binary directory with its pg_rewind, and picks the ports.
func (p *Patroni) layout() error {
	dir, err := filepath.Abs(p.opts.Dir)
	if err != nil {
		return err
	}
	p.opts.Dir = dir
	p.binDir, p.copiesDir = filepath.Join(dir, "bin"), filepath.Join(dir, "copies")
	p.ctlConfig = filepath.Join(dir, "patronictl.yml")
	for _, d := range []string{p.binDir, p.copiesDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	// The wrapper runs as the server's OS user and writes its copies there.
	if err := os.Chmod(p.copiesDir, 0o755); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := p.chown(p.copiesDir); err != nil {
		return err
	}
	if err := p.linkBinaries(); err != nil {
		return err
	}
	if err := p.etcd.layout(dir); err != nil {
		return err
	}
	for i := range patroniNodes {
		n := &PatroniNode{Name: fmt.Sprintf("n%d", i), p: p}
		n.dir = filepath.Join(dir, n.Name)
		n.dataDir, n.config, n.logFile = filepath.Join(n.dir, "data"), filepath.Join(n.dir, "patroni.yml"), filepath.Join(n.dir, "patroni.log")
		if n.pgPort, err = freePort(); err != nil {
			return err
		}
		if n.apiPort, err = freePort(); err != nil {
			return err
		}
		// The node's directory is its server's: Patroni writes the password file (pgpass) there.
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if err := os.Mkdir(filepath.Join(n.dir, "sock"), 0o700); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if err := p.chown(n.dir, filepath.Join(n.dir, "sock")); err != nil {
			return err
		}
		p.nodes = append(p.nodes, n)
	}
	return nil
}

// rewindWrapper is bin/pg_rewind: Patroni runs `pg_rewind -D <data dir> --source-server …` on a
// failed leader once another node leads; the copy keeps what that leader had committed. A copy
// appears under copies/ whole (renamed into place) or not at all.
const rewindWrapper = `#!/bin/sh
target=
prev=
for a in "$@"; do
	[ "$prev" = -D ] && target=$a
	case $a in --target-pgdata=*) target=${a#--target-pgdata=} ;; esac
	prev=$a
done
if [ -n "$target" ]; then
	dst=%s/$(basename "$(dirname "$target")")-$(date +%%s%%N)
	mkdir -m 0755 "$dst.tmp" && cp -a "$target" "$dst.tmp/data" && mv "$dst.tmp" "$dst" || exit 1
fi
exec %s "$@"
`

// linkBinaries fills bin/ with links to the server binaries, and the pg_rewind wrapper.
func (p *Patroni) linkBinaries() error {
	src := filepath.Dir(p.pgCtl)
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	for _, e := range entries {
		if e.Name() == "pg_rewind" {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(p.binDir, e.Name())); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	script := fmt.Sprintf(rewindWrapper, shellQuote(p.copiesDir), shellQuote(filepath.Join(src, "pg_rewind")))
	if err := writeFileNoFollow(filepath.Join(p.binDir, "pg_rewind"), []byte(script), 0o755); err != nil {
		return err
	}
	return nil
}

// start starts etcd, the first node, then the others.
func (p *Patroni) start(ctx context.Context) error {
	if err := p.etcd.start(ctx); err != nil {
		return err
	}
	for _, n := range p.nodes {
		if err := p.writeConfig(n); err != nil {
			return err
		}
	}
	if err := p.writeCtlConfig(); err != nil {
		return err
	}
	if err := p.nodes[0].StartPatroni(); err != nil {
		return err
	}
	// The first node bootstraps (initdb) alone; the others then copy it.
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		st, err := p.nodes[0].Status(ctx)
		return err == nil && st.Role == "master" && st.State == "running", err
	}, "the first Patroni node to bootstrap the cluster")
	if err != nil {
		return p.withLog(err, p.nodes[0])
	}
	for _, n := range p.nodes[1:] {
		if err := n.StartPatroni(); err != nil {
			return err
		}
	}
	if err := p.WaitHealthy(ctx, 3*time.Minute); err != nil {
		return p.withLog(err, p.nodes...)
	}
	return nil
}

// withLog adds the tail of the nodes' logs to err.
func (p *Patroni) withLog(err error, nodes ...*PatroniNode) error {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "\n--- %s:\n%s", n.logFile, strings.TrimSpace(readFrom(n.logFile, max(fileSize(n.logFile)-2048, 0))))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// writeConfig writes node n's Patroni configuration (JSON, which is YAML), readable by its
// server's OS user alone: it holds the password.
func (p *Patroni) writeConfig(n *PatroniNode) error {
	etcdAddr, err := p.proxy(n, "etcd", p.etcd.clientAddr())
	if err != nil {
		return err
	}
	pgAddr, apiAddr := hostPort(n.pgPort), hostPort(n.apiPort)
	published, err := p.proxy(n, "postgres", pgAddr)
	if err != nil {
		return err
	}
	apiPublished, err := p.proxy(n, "api", apiAddr)
	if err != nil {
		return err
	}
	sync := p.opts.Mode == Synchronous
	role := func(name string) map[string]string {
		return map[string]string{"username": name, "password": p.password}
	}
	cfg := map[string]any{
		"scope": patroniScope, "namespace": "/taskling/", "name": n.Name,
		"restapi": map[string]any{"listen": apiAddr, "connect_address": apiPublished},
		// use_proxies: dial the address given, not the members etcd advertises (past a proxy).
		"etcd3": map[string]any{"hosts": []string{etcdAddr}, "protocol": "http", "use_proxies": true},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": int(PatroniTTL / time.Second), "loop_wait": int(PatroniLoopWait / time.Second),
				"retry_timeout": int(PatroniRetryTimeout / time.Second), "maximum_lag_on_failover": PatroniMaxLagOnFailover,
				"synchronous_mode": sync, "synchronous_mode_strict": sync,
				"postgresql": map[string]any{"use_pg_rewind": true, "use_slots": true,
					"parameters": map[string]any{"max_connections": 400, "wal_log_hints": "on"}},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}, map[string]string{"auth": "scram-sha-256"}},
		},
		"postgresql": map[string]any{
			"listen": pgAddr, "connect_address": published, "data_dir": n.dataDir, "bin_dir": p.binDir,
			"pgpass":         filepath.Join(n.dir, "pgpass"),
			"authentication": map[string]any{"superuser": role(superuser), "replication": role(replicationRole), "rewind": role(superuser)},
			"parameters":     map[string]any{"unix_socket_directories": filepath.Join(n.dir, "sock")},
			"basebackup":     []any{map[string]string{"checkpoint": "fast"}},
			"pg_hba": []string{"host all all 127.0.0.1/32 scram-sha-256",
				"host replication " + replicationRole + " 127.0.0.1/32 scram-sha-256"},
		},
		"watchdog": map[string]any{"mode": "off"},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileNoFollow(n.config, b, 0o600); err != nil {
		return err
	}
	return p.chown(n.config)
}

// proxy is the address through which n (or, for "etcd", n's Patroni) reaches addr.
func (p *Patroni) proxy(n *PatroniNode, service, addr string) (string, error) {
	if p.opts.Proxy == nil {
		return addr, nil
	}
	a, err := p.opts.Proxy(n.Name, service, addr)
	if err != nil {
		return "", fmt.Errorf("pgcluster: the %s address of %s: %w", service, n.Name, err)
	}
	return a, nil
}

// writeCtlConfig writes patronictl's configuration: the cluster's scope, etcd reached directly.
func (p *Patroni) writeCtlConfig() error {
	cfg := map[string]any{"scope": patroniScope, "namespace": "/taskling/",
		"etcd3": map[string]any{"hosts": []string{p.etcd.clientAddr()}, "protocol": "http"}}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return writeFileNoFollow(p.ctlConfig, b, 0o600)
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// chown gives paths to the server's OS user (a no-op when that is us).
func (p *Patroni) chown(paths ...string) error {
	if p.cred == nil {
		return nil
	}
	for _, path := range paths {
		if err := os.Lchown(path, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: give %s to the postgres OS user: %w", path, err)
		}
	}
	return nil
}

// Nodes are the cluster's nodes, n0 first: the order of the hosts in URL.
func (p *Patroni) Nodes() []*PatroniNode { return append([]*PatroniNode(nil), p.nodes...) }

// URL is the multi-host URL of database db, as clients of a Patroni cluster without a proxy
// use it: every node, the primary chosen by target_session_attrs=read-write, a connect timeout
// of 2 s per host.
func (p *Patroni) URL(db string) string {
	hosts := make([]string, len(p.nodes))
	for i, n := range p.nodes {
		hosts[i] = hostPort(n.pgPort)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(superuser, p.password), Host: strings.Join(hosts, ","), Path: "/" + db,
		RawQuery: "sslmode=disable&target_session_attrs=read-write&connect_timeout=2"}
	return u.String()
}

// URL is the superuser's URL of the node's "postgres" database, whatever its role.
func (n *PatroniNode) URL() string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(superuser, n.p.password), Host: hostPort(n.pgPort), Path: "/postgres",
		RawQuery: "sslmode=disable"}
	return u.String()
}

// Port is the node's PostgreSQL port; DataDir its data directory; LogFile Patroni's log, which
// holds its server's too.
func (n *PatroniNode) Port() int       { return n.pgPort }
func (n *PatroniNode) DataDir() string { return n.dataDir }
func (n *PatroniNode) LogFile() string { return n.logFile }
func (n *PatroniNode) String() string  { return n.Name }
func (n *PatroniNode) apiURL(path string) string {
	return "http://" + hostPort(n.apiPort) + path
}

// StartPatroni starts the node's Patroni (again, after KillPatroni), as the server's OS user.
func (n *PatroniNode) StartPatroni() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.daemon != nil && n.daemon.alive() {
		return fmt.Errorf("pgcluster: the Patroni of %s runs already", n.Name)
	}
	cmd := exec.Command(n.p.patroni, n.config)
	cmd.Dir = n.dir
	cmd.Env = append(serverEnv(), "HOME="+n.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.p.cred}
	d, err := startDaemon(cmd, n.logFile)
	if err != nil {
		return fmt.Errorf("pgcluster: start the Patroni of %s: %w", n.Name, err)
	}
	n.daemon = d
	return nil
}

// PatroniRunning reports whether the node's Patroni runs.
func (n *PatroniNode) PatroniRunning() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.daemon != nil && n.daemon.alive()
}

// Close kills every Patroni, then stops every server (immediate mode: the data is disposable),
// the copies Inspect started among them, then etcd. It returns the first error.
func (p *Patroni) Close(ctx context.Context) error {
	var errs []error
	for _, n := range p.nodes {
		n.mu.Lock()
		d := n.daemon
		n.mu.Unlock()
		if d != nil {
			d.kill()
		}
	}
	for _, n := range p.nodes {
		if err := p.stopServer(ctx, n.dataDir); err != nil {
			errs = append(errs, err)
		}
	}
	p.mu.Lock()
	inspected := append([]*Cluster(nil), p.inspected...)
	p.mu.Unlock()
	for _, c := range inspected {
		if err := c.StopMode(ctx, StopImmediate); err != nil {
			errs = append(errs, err)
		}
	}
	if p.etcd != nil {
		p.etcd.stop()
	}
	return errors.Join(errs...)
}

// stopServer stops the postmaster of dataDir, if one runs (pg_ctl stop -m immediate), and makes
// sure none of its processes is left.
func (p *Patroni) stopServer(ctx context.Context, dataDir string) error {
	pid, ok := postmasterOf(dataDir)
	if !ok {
		return nil
	}
	cmd := exec.CommandContext(ctx, p.pgCtl, "stop", "-w", "-t", "30", "-m", "immediate", "-D", dataDir)
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	// A postmaster pg_ctl could not stop (say one still SIGSTOPped): kill it and its children.
	pids := freezeAndKill(pid)
	if werr := waitGone(ctx, pids); werr != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop %s: %w: %s; %w", dataDir, err, strings.TrimSpace(string(out)), werr)
	}
	return nil
}

// postmasterOf reads dataDir's postmaster.pid and returns its pid if that process is alive and
// serves dataDir.
func postmasterOf(dataDir string) (int, bool) {
	c := &Cluster{dataDir: dataDir}
	pid, _, ok := c.livePostmaster()
	return pid, ok
}

// daemon is a long-running process we started, reaped by a goroutine of its own.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startDaemon starts cmd with its output appended to logFile. The process is killed if we die
// (a test binary killed by its timeout runs no cleanup).
func startDaemon(cmd *exec.Cmd, logFile string) (*daemon, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to exit; it returns when the signal was sent.
func (d *daemon) kill() time.Time {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	at := time.Now()
	<-d.done
	return at
}

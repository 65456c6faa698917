package pgcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/internal/devtools/freeport"
)

// EnvDatabaseURL names a PostgreSQL server to use instead of the private cluster.
const EnvDatabaseURL = "TASKLING_DATABASE_URL"

// Options configure where the cluster lives and which binaries run it. A nil *Options or a zero
// field means the default.
type Options struct {
	// Dir is the cluster's directory. Default: $TASKLING_PG_DIR, else <repo root>/.taskling/pg,
	// else (the postgres OS user cannot reach the repo) /tmp/taskling-pg-<hash of the repo path>.
	Dir string
	// SearchPath lists the directories searched, in order, for one holding both initdb and
	// pg_ctl. Default: $PATH, then /usr/lib/postgresql/<version>/bin, highest version first.
	SearchPath []string
}

// StopMode is pg_ctl's shutdown mode.
type StopMode string

const (
	// StopFast disconnects clients, rolls back their transactions and shuts down cleanly.
	StopFast StopMode = "fast"
	// StopImmediate kills the server without a checkpoint, like a crash: the next start runs
	// crash recovery. Committed transactions survive (fsync is on).
	StopImmediate StopMode = "immediate"
)

// Settings the server starts with, beyond the PostgreSQL defaults (fsync, full_page_writes and
// synchronous_commit stay on: see the package comment).
var serverSettings = []string{
	"listen_addresses=127.0.0.1",
	"max_connections=400",
	"shared_buffers=128MB",
}

const (
	superuser = "postgres"
	// replicationRole is what a streaming standby of this cluster connects as.
	replicationRole = "taskling_replication"
	startTimeout    = 120 * time.Second // pg_ctl -t: crash recovery included
	readyTimeout    = 3 * time.Minute
	answerTimeout   = 30 * time.Second
	// A Unix socket path must fit sockaddr_un.sun_path (108 bytes on Linux) with its
	// "/.s.PGSQL.NNNNN" suffix; a deeper cluster directory gets no socket (TCP is what we use).
	maxSocketDir = 107 - len("/.s.PGSQL.65535")
)

// Cluster is a private PostgreSQL cluster in one directory. Its methods are safe for concurrent
// use; methods that start or stop the server hold the directory's flock.
type Cluster struct {
	dir       string
	dataDir   string
	sockDir   string // "" when the path is too long for a Unix socket
	logFile   string
	stateFile string
	pwFile    string // the password of the superuser and the replication role, 0600
	lockPath  string
	leaseDir  string
	initdb    string
	pgCtl     string
	cred      *syscall.Credential // nil: run the server as ourselves

	mu       sync.Mutex
	port     int
	started  bool
	password string // "" until the cluster was made with one
}

// state is state.json: what other processes (and people) need to find the cluster.
type state struct {
	Port    int    `json:"port"`
	URL     string `json:"url"`
	DataDir string `json:"data_dir"`
	// Managed: a lease holder started the cluster, so the last lease released stops it.
	Managed bool `json:"managed,omitempty"`
}

// Ensure returns the cluster of opts' directory, running and answering queries: it reuses a
// server already running from that directory and otherwise creates (initdb) and starts one.
// Concurrent calls from any number of goroutines and processes start at most one server.
func Ensure(ctx context.Context, opts *Options) (*Cluster, error) {
	c, unlock, err := ensureUnderLock(ctx, opts, false)
	if err != nil {
		return nil, err
	}
	unlock()
	return c, nil
}

// ensureUnderLock makes sure the cluster runs and returns it with its lock file still held.
// managed says whether a cluster this call starts is stopped by the last ReleaseLease.
func ensureUnderLock(ctx context.Context, opts *Options, managed bool) (*Cluster, func(), error) {
	c, err := Open(opts)
	if err != nil {
		return nil, nil, err
	}
	l, err := lockFile(ctx, c.lockPath)
	if err != nil {
		return nil, nil, err
	}
	started, err := c.ensureLocked(ctx, true)
	if err == nil && started {
		err = c.updateState(func(s *state) { s.Managed = managed })
	}
	if err != nil {
		l.unlock()
		return nil, nil, err
	}
	return c, l.unlock, nil
}

// DatabaseURL returns $TASKLING_DATABASE_URL when set, else the URL of the private cluster,
// which it starts if needed. It is what programs (demo, bench) call to find a server.
func DatabaseURL(ctx context.Context) (string, error) {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		return u, nil
	}
	c, err := Ensure(ctx, nil)
	if err != nil {
		return "", err
	}
	return c.URL(), nil
}

// Open locates the cluster's directory and binaries without starting anything. It creates the
// directory if needed and reads the last known port from state.json.
func Open(opts *Options) (*Cluster, error) {
	if opts == nil {
		opts = &Options{}
	}
	searchPath := opts.SearchPath
	if searchPath == nil {
		searchPath = defaultSearchPath()
	}
	initdb, pgCtl, err := findBinaries(searchPath)
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := resolveDir(opts, cred, pgCtl)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		dir:       dir,
		dataDir:   filepath.Join(dir, "data"),
		sockDir:   filepath.Join(dir, "sock"),
		logFile:   filepath.Join(dir, "postgres.log"),
		stateFile: filepath.Join(dir, "state.json"),
		pwFile:    filepath.Join(dir, "password"),
		lockPath:  filepath.Join(dir, "lock"),
		leaseDir:  filepath.Join(dir, "leases"),
		initdb:    initdb,
		pgCtl:     pgCtl,
		cred:      cred,
	}
	if len(c.sockDir) > maxSocketDir {
		c.sockDir = ""
	}
	if err := mkdirAllTraversable(dir); err != nil {
		return nil, err
	}
	if err := c.secureDir(); err != nil {
		return nil, err
	}
	if cred != nil && !canEnter(dir, cred, pgCtl) {
		return nil, fmt.Errorf("pgcluster: the postgres OS user cannot enter %s (check the permissions of its parents, or set %s)", dir, EnvDir)
	}
	st, err := c.readState()
	if err != nil {
		return nil, err
	}
	c.port = st.Port
	c.password = c.readPassword()
	return c, nil
}

// URL is the superuser's URL of the cluster's "postgres" database, with its password.
func (c *Cluster) URL() string { return c.urlFor(superuser, c.Port()) }

// ReplicationURL is the URL a streaming standby connects with (pg_basebackup, primary_conninfo).
func (c *Cluster) ReplicationURL() string { return c.urlFor(replicationRole, c.Port()) }

func (c *Cluster) urlFor(role string, port int) string {
	c.mu.Lock()
	pw := c.password
	c.mu.Unlock()
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, pw), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path: "/postgres", RawQuery: "sslmode=disable"}
	return u.String()
}

// Port is the TCP port the server listens on (on 127.0.0.1); 0 if it never started.
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// Dir is the cluster's directory; DataDir its data directory; LogFile the server's log.
func (c *Cluster) Dir() string     { return c.dir }
func (c *Cluster) DataDir() string { return c.dataDir }
func (c *Cluster) LogFile() string { return c.logFile }

// Started reports whether this Cluster value started the server (rather than reusing one).
func (c *Cluster) Started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// Running reports whether the cluster's server is up and answering queries, without waiting
// for one that is starting.
func (c *Cluster) Running(ctx context.Context) bool {
	_, port, ok := c.livePostmaster()
	if !ok {
		return false
	}
	ok, _ = c.answers(ctx, port)
	if ok {
		c.setPort(port)
	}
	return ok
}

// Stop shuts the server down in fast mode. Stopping a cluster that is not running is no error.
func (c *Cluster) Stop(ctx context.Context) error {
	return c.StopMode(ctx, StopFast)
}

// StopMode shuts the server down with pg_ctl's mode ("fast" or "immediate"; "smart" too) and
// waits for it to exit. Stopping a cluster that is not running is no error.
func (c *Cluster) StopMode(ctx context.Context, mode StopMode) error {
	switch mode {
	case StopFast, StopImmediate, "smart":
	default:
		return fmt.Errorf("pgcluster: unknown stop mode %q (want fast, immediate or smart)", mode)
	}
	l, err := lockFile(ctx, c.lockPath)
	if err != nil {
		return err
	}
	defer l.unlock()
	return c.stopLocked(ctx, mode)
}

// StopRunning is Stop that also says whether there was a server to stop.
func (c *Cluster) StopRunning(ctx context.Context) (bool, error) {
	l, err := lockFile(ctx, c.lockPath)
	if err != nil {
		return false, err
	}
	defer l.unlock()
	if _, _, ok := c.livePostmaster(); !ok {
		return false, nil
	}
	return true, c.stopLocked(ctx, StopFast)
}

func (c *Cluster) stopLocked(ctx context.Context, mode StopMode) error {
	if _, _, ok := c.livePostmaster(); !ok {
		return nil
	}
	out, err := c.PgCtl(ctx, "stop", "-w", "-t", "60", "-m", string(mode), "-D", c.dataDir)
	if err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop -m %s: %w: %s", mode, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Start starts a stopped server again on the same port, so URLs handed out before stay valid
// (after StopMode(ctx, StopImmediate) this includes crash recovery). If the server is already
// running, Start only waits until it answers. It fails rather than move to another port.
func (c *Cluster) Start(ctx context.Context) error {
	l, err := lockFile(ctx, c.lockPath)
	if err != nil {
		return err
	}
	defer l.unlock()
	_, err = c.ensureLocked(ctx, c.Port() == 0)
	return err
}

// Restart stops the server with mode and starts it again on the same port.
func (c *Cluster) Restart(ctx context.Context, mode StopMode) error {
	if err := c.StopMode(ctx, mode); err != nil {
		return err
	}
	return c.Start(ctx)
}

// ensureLocked makes the server run and answer; it reports whether it had to start it. mayMove
// allows a start on another port than the last one.
func (c *Cluster) ensureLocked(ctx context.Context, mayMove bool) (started bool, err error) {
	// What Open read may be stale: another process (or Cluster) may have made or started the
	// cluster since, under this lock. Judging by a stale empty password would remake it.
	if st, err := c.readState(); err == nil && st.Port != 0 {
		c.setPort(st.Port)
	}
	if pw := c.readPassword(); pw != "" {
		c.mu.Lock()
		c.password = pw
		c.mu.Unlock()
	}
	if _, _, ok := c.livePostmaster(); ok && c.currentPassword() == "" {
		// Made by an older version without a password (trust auth): replace it. It only ever
		// holds disposable test data.
		if err := c.stopLocked(ctx, StopImmediate); err != nil {
			return false, err
		}
	}
	if _, port, ok := c.livePostmaster(); ok {
		switch err := c.waitReady(ctx, port); {
		case err == nil:
			c.setPort(port)
			return false, c.updateState(func(*state) {})
		case errors.Is(err, errGone):
			// It exited while we waited (it was stopping): start it below.
		default:
			// Alive but not answering within readyTimeout: replace it.
			if err := c.stopLocked(ctx, StopImmediate); err != nil {
				return false, err
			}
		}
	}
	made, err := c.initIfNeeded(ctx)
	if err != nil {
		return false, err
	}
	if err := c.startLocked(ctx, mayMove); err != nil {
		return false, err
	}
	if made {
		if err := c.createReplicationRole(ctx); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	return true, nil
}

// initIfNeeded makes the data directory unless one of this major version, made with a password,
// exists; made reports whether it did.
func (c *Cluster) initIfNeeded(ctx context.Context) (made bool, err error) {
	if b, err := os.ReadFile(filepath.Join(c.dataDir, "PG_VERSION")); err == nil && c.currentPassword() != "" {
		out, err := c.run(ctx, c.pgCtl, "--version")
		if err != nil {
			return false, fmt.Errorf("pgcluster: pg_ctl --version: %w: %s", err, out)
		}
		major, err := majorVersion(string(out))
		if err != nil {
			return false, err
		}
		if strings.TrimSpace(string(b)) == major {
			return false, nil
		}
		// Made by another major version (say a CI cache from an older image): the cluster only
		// ever holds disposable test data, so start afresh rather than fail.
	}
	// Absent, made without a password by an older version, or left half-made by an initdb that
	// died: make it anew.
	if err := os.RemoveAll(c.dataDir); err != nil {
		return false, fmt.Errorf("pgcluster: remove %s: %w", c.dataDir, err)
	}
	if err := os.Mkdir(c.dataDir, 0o700); err != nil {
		return false, fmt.Errorf("pgcluster: create %s: %w", c.dataDir, err)
	}
	if err := c.chown(c.dataDir); err != nil {
		return false, err
	}
	pw, err := c.newPassword()
	if err != nil {
		return false, err
	}
	// initdb reads the superuser's password from a file the server's OS user can read; it lives
	// only while initdb runs.
	pwInit := filepath.Join(c.dir, "initdb-password")
	if err := writeFileNoFollow(pwInit, []byte(pw+"\n"), 0o600); err != nil {
		return false, err
	}
	defer os.Remove(pwInit)
	if err := c.chown(pwInit); err != nil {
		return false, err
	}
	out, err := c.run(ctx, c.initdb, "-D", c.dataDir, "--auth=scram-sha-256", "--pwfile="+pwInit, "-U", superuser,
		"--encoding=UTF8", "--locale=C")
	if err != nil {
		return false, fmt.Errorf("pgcluster: initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return true, nil
}

// createReplicationRole adds the role streaming standbys connect as (pg_hba.conf, as initdb
// writes it, lets it replicate from 127.0.0.1 with its password).
func (c *Cluster) createReplicationRole(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return fmt.Errorf("pgcluster: create the replication role: %w", err)
	}
	defer conn.Close(context.Background())
	// No parameters in utility statements: the password is hex, so quoting it is exact.
	_, err = conn.Exec(ctx, fmt.Sprintf("CREATE ROLE %s WITH REPLICATION LOGIN PASSWORD '%s'", replicationRole, c.currentPassword()))
	if err != nil {
		return fmt.Errorf("pgcluster: create the replication role: %w", err)
	}
	return nil
}

// startLocked starts the server on the last known port when it is free, else (mayMove) on a new
// free one; a port taken between our check and the server's bind is retried with another.
func (c *Cluster) startLocked(ctx context.Context, mayMove bool) error {
	if c.sockDir != "" {
		// The server's alone (connections use TCP): 0700 whatever the umask or an older version.
		if err := os.MkdirAll(c.sockDir, 0o700); err != nil {
			return fmt.Errorf("pgcluster: create %s: %w", c.sockDir, err)
		}
		if err := os.Chmod(c.sockDir, 0o700); err != nil {
			return fmt.Errorf("pgcluster: chmod %s: %w", c.sockDir, err)
		}
	}
	if err := touchPrivate(c.logFile); err != nil {
		return err
	}
	if err := c.chown(c.dataDir, c.sockDir, c.logFile); err != nil {
		return err
	}
	port := c.Port()
	for attempt := 1; ; attempt++ {
		if port == 0 || (mayMove && !portFree(port)) {
			p, err := freePort()
			if err != nil {
				return err
			}
			port = p
		}
		c.removeStaleLocks()
		logStart := fileSize(c.logFile)
		out, err := c.PgCtl(ctx, "start", "-w", "-t", strconv.Itoa(int(startTimeout/time.Second)),
			"-D", c.dataDir, "-l", c.logFile, "-o", c.serverOptions(port))
		if err == nil {
			if err := c.waitReady(ctx, port); err != nil {
				return fmt.Errorf("pgcluster: server started on port %d but does not answer: %w (log: %s)", port, err, c.logFile)
			}
			c.setPort(port)
			return c.updateState(func(*state) {})
		}
		logTail := readFrom(c.logFile, logStart)
		switch {
		case ctx.Err() != nil:
		case attempt < 5 && strings.Contains(logTail, "could not bind IPv4 address"):
			if mayMove {
				port = 0 // someone took it between portFree and the bind
			} else {
				time.Sleep(200 * time.Millisecond)
			}
			continue
		case attempt < 40 && strings.Contains(logTail, "pre-existing shared memory block"):
			// Backends of a crashed server still detach from its shared memory.
			time.Sleep(250 * time.Millisecond)
			continue
		}
		return fmt.Errorf("pgcluster: start PostgreSQL on port %d: %w: %s\n%s", port, err,
			strings.TrimSpace(string(out)), strings.TrimSpace(logTail))
	}
}

func (c *Cluster) serverOptions(port int) string {
	// pg_ctl hands this string to /bin/sh: quote every value.
	opts := []string{"-p", strconv.Itoa(port), "-c", "unix_socket_directories=" + shellQuote(c.sockDir)}
	for _, s := range serverSettings {
		opts = append(opts, "-c", shellQuote(s))
	}
	return strings.Join(opts, " ")
}

var errGone = errors.New("pgcluster: server exited")

// waitReady waits until the server on port answers as this cluster, the postmaster exits
// (errGone), or readyTimeout passes.
func (c *Cluster) waitReady(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		ok, err := c.answers(ctx, port)
		if ok || errors.Is(err, errForeign) {
			return err
		}
		if _, _, alive := c.livePostmaster(); !alive {
			return errGone
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var errForeign = errors.New("pgcluster: another cluster answers on this port")

// answers connects to port and checks that the server there serves our data directory. It waits
// up to answerTimeout for the server: a loaded server may leave a connection in its accept queue
// for tens of seconds (clients that gave up and came back kept it full, in the chaos runs beside
// make test), and one that gives up sooner leaves its place to no one and never gets in.
func (c *Cluster) answers(ctx context.Context, port int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.urlFor(superuser, port)+"&connect_timeout="+strconv.Itoa(int(answerTimeout/time.Second)))
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var dataDir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err != nil {
		return false, err
	}
	if !samePath(dataDir, c.dataDir) {
		return false, fmt.Errorf("%w: port %d serves %s", errForeign, port, dataDir)
	}
	return true, nil
}

// livePostmaster reads data/postmaster.pid and reports the server's pid and port if that
// process is alive and is this cluster's postmaster (not a process that reused a stale pid).
// PostmasterPID is the running server's postmaster process id, if it runs.
func (c *Cluster) PostmasterPID() (int, bool) {
	pid, _, ok := c.livePostmaster()
	return pid, ok
}

func (c *Cluster) livePostmaster() (pid, port int, ok bool) {
	pid, port, err := c.readPidFile()
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, port, c.isOurPostmaster(pid)
}

// readPidFile parses postmaster.pid: line 1 the pid, line 4 the port.
func (c *Cluster) readPidFile() (pid, port int, err error) {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, 0, err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, 0, errors.New("short postmaster.pid")
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	return pid, port, errors.Join(err1, err2)
}

func (c *Cluster) isOurPostmaster(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		if fileExists("/proc/self/cmdline") {
			return false // no such process
		}
		// No /proc: trust a live pid.
		err := syscall.Kill(pid, 0)
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	// pg_ctl starts the postmaster as `postgres -D <dataDir> ...`.
	for _, arg := range strings.Split(string(b), "\x00") {
		if arg == c.dataDir {
			return true
		}
	}
	return false
}

// removeStaleLocks runs before a start, when no postmaster of ours is alive. PostgreSQL removes
// a postmaster.pid whose pid is dead (after checking that no orphaned backend still uses the old
// shared memory), but refuses one whose pid now belongs to another process — common after a
// reboot or in containers — so remove that one. Socket lock files in our private socket
// directory are all stale at this point.
func (c *Cluster) removeStaleLocks() {
	if pid, _, err := c.readPidFile(); err == nil && pid > 0 && !c.isOurPostmaster(pid) && processExists(pid) {
		os.Remove(filepath.Join(c.dataDir, "postmaster.pid"))
	}
	if c.sockDir != "" {
		matches, _ := filepath.Glob(filepath.Join(c.sockDir, ".s.PGSQL.*"))
		for _, m := range matches {
			os.Remove(m)
		}
	}
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func (c *Cluster) setPort(port int) {
	c.mu.Lock()
	c.port = port
	c.mu.Unlock()
}

func (c *Cluster) readState() (state, error) {
	var st state
	b, err := os.ReadFile(c.stateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("pgcluster: read %s: %w", c.stateFile, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return state{}, nil // a torn or hand-edited file: the pid file is the truth anyway
	}
	return st, nil
}

// updateState rewrites state.json (atomically) with the current port and URL, after edit.
func (c *Cluster) updateState(edit func(*state)) error {
	st, err := c.readState()
	if err != nil {
		return err
	}
	st.Port, st.URL, st.DataDir = c.Port(), c.URL(), c.dataDir
	edit(&st)
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.stateFile + ".tmp"
	// 0600: it holds the URL, and so the password.
	if err := writeFileNoFollow(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("pgcluster: write state: %w", err)
	}
	if err := os.Rename(tmp, c.stateFile); err != nil {
		return fmt.Errorf("pgcluster: write state: %w", err)
	}
	return nil
}

// freePort returns a port outside the kernel's ephemeral range (see freeport). Another process
// may still take it before the server binds it; startLocked retries then.
func freePort() (int, error) {
	port, err := freeport.Get()
	if err != nil {
		return 0, fmt.Errorf("pgcluster: %w", err)
	}
	return port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// mkdirAllTraversable is os.MkdirAll that makes the directories it creates 0755 whatever the
// umask, so that the postgres OS user can reach the cluster through them.
func mkdirAllTraversable(dir string) error {
	var created []string
	for d := dir; !fileExists(d); d = filepath.Dir(d) {
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pgcluster: create %s: %w", dir, err)
	}
	for _, d := range created {
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("pgcluster: chmod %s: %w", d, err)
		}
	}
	return nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func samePath(a, b string) bool {
	if a == b {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// touchPrivate creates path 0600 unless it exists, and makes it 0600 if it does (a server log
// left by an older version was 0644: it holds statements, and so test data, for everyone).
func touchPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("pgcluster: create %s: %w", path, err)
	}
	err = f.Chmod(0o600)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: chmod %s: %w", path, err)
	}
	return nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the file's content from offset on, at most its last 4 KiB.
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	b = b[offset:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

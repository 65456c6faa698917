// Package pgbouncer runs a private PgBouncer in front of a PostgreSQL server, for the tests and
// the benchmark that check taskling behind a pooler. Each Bouncer has its own temporary
// directory (configuration and auth file), listens on a free port of 127.0.0.1 only, forwards
// every database name to the server (a "*" entry), and pools in transaction mode unless told
// otherwise. Like the private cluster it runs as the postgres OS user when we are root:
// pgbouncer refuses to run as root.
//
//	b := pgbouncer.ForTest(t, pgtest.DatabaseURL(t))
//	cfg, _ := pgxpool.ParseConfig(b.MustURL(t, dbURL))
//	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe // 1.18: no prepared statements
package pgbouncer

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

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskling-go/taskling/internal/devtools/freeport"
	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
)

// ErrNotInstalled means no pgbouncer binary was found.
var ErrNotInstalled = errors.New("pgbouncer: no pgbouncer binary on PATH or in /usr/sbin; install Debian's pgbouncer package")

// Options configure a Bouncer; a nil *Options or a zero field means the default.
type Options struct {
	// PoolMode is pgbouncer's pool_mode: "transaction" (default), "session" or "statement".
	PoolMode string
	// PoolSize is default_pool_size, the server connections per database and user. Default 20.
	PoolSize int
}

// Bouncer is a running pgbouncer process.
type Bouncer struct {
	addr    string // 127.0.0.1:port
	dir     string
	bin     string
	ini     string
	cred    *syscall.Credential
	version string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *lockedBuffer // every incarnation's output
}

// Find returns the path of the pgbouncer binary: on PATH, else Debian's /usr/sbin (off a
// non-root user's PATH).
func Find() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Start starts a pgbouncer in front of the server of serverURL (its host, port, user and
// password; its database does not matter: every name is forwarded). Stop it with Stop.
func Start(ctx context.Context, serverURL string, opts *Options) (*Bouncer, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	o := Options{PoolMode: "transaction", PoolSize: 20}
	if opts != nil && opts.PoolMode != "" {
		o.PoolMode = opts.PoolMode
	}
	if opts != nil && opts.PoolSize > 0 {
		o.PoolSize = opts.PoolSize
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: parse the server URL: %w", err)
	}
	cred, err := pgcluster.ServerCredential()
	if err != nil {
		return nil, err
	}
	version, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %s --version: %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "taskling-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	b, err := start(ctx, bin, dir, server, o, cred)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b.version, _, _ = strings.Cut(strings.TrimSpace(string(version)), "\n")
	return b, nil
}

// start writes the files into dir and starts the process; a port taken between our check and
// pgbouncer's bind is retried with another.
func start(ctx context.Context, bin, dir string, server *pgconn.Config, o Options, cred *syscall.Credential) (*Bouncer, error) {
	// The postgres OS user reads the files through dir; only the auth file holds a secret.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	authFile := filepath.Join(dir, "userlist.txt")
	if err := writeOwned(authFile, []byte(quote(server.User)+" "+quote(server.Password)+"\n"), 0o600, cred); err != nil {
		return nil, err
	}
	b := &Bouncer{dir: dir, bin: bin, ini: filepath.Join(dir, "pgbouncer.ini"), cred: cred, log: &lockedBuffer{}}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if err := writeOwned(b.ini, []byte(config(server, o, port, authFile)), 0o644, cred); err != nil {
			return nil, err
		}
		b.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		logStart := len(b.Log())
		err = b.launch(ctx)
		if err == nil {
			return b, nil
		}
		if attempt < 5 && strings.Contains(b.Log()[logStart:], "in use") {
			continue
		}
		return nil, err
	}
}

// launch starts the process on b's configuration and waits until it listens.
func (b *Bouncer) launch(ctx context.Context) error {
	cmd := exec.Command(b.bin, b.ini)
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if b.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: start %s: %w", b.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	b.mu.Lock()
	b.cmd, b.done = cmd, done
	b.mu.Unlock()
	if err := b.waitListening(ctx, done); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return err
	}
	return nil
}

// Restart kills pgbouncer (SIGKILL: every client connection breaks, and every server
// connection, in a transaction or not), waits down, and starts it again on the same port. It
// also starts one that exited on its own.
func (b *Bouncer) Restart(ctx context.Context, down time.Duration) error {
	b.kill()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		// The kernel may hold the port for a moment after the kill.
		logStart := len(b.Log())
		if err = b.launch(ctx); err == nil || !strings.Contains(b.Log()[logStart:], "in use") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func (b *Bouncer) kill() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
}

// config is pgbouncer.ini: every database name forwarded to the server, clients authenticated
// with the server's own user and password (which pgbouncer then uses for the server, by SCRAM).
func config(server *pgconn.Config, o Options, port int, authFile string) string {
	auth := "scram-sha-256"
	if server.Password == "" {
		auth = "trust" // a server that wants no password (a local socket, trust)
	}
	sslmode := "prefer"
	if server.TLSConfig == nil {
		sslmode = "disable"
	}
	lines := []string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%d", server.Host, server.Port),
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		fmt.Sprintf("listen_port = %d", port),
		"unix_socket_dir =",
		"auth_type = " + auth,
		"auth_file = " + authFile,
		"pool_mode = " + o.PoolMode,
		fmt.Sprintf("default_pool_size = %d", o.PoolSize),
		"max_client_conn = 2000",
		"server_tls_sslmode = " + sslmode,
		"ignore_startup_parameters = extra_float_digits",
		"server_login_retry = 1",
		"log_connections = 0",
		"log_disconnections = 0",
	}
	return strings.Join(lines, "\n") + "\n"
}

// waitListening waits until the port accepts connections, the process exits (done), or 30 s
// pass.
func (b *Bouncer) waitListening(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("pgbouncer: exited at start: %s", strings.TrimSpace(b.Log()))
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer: not listening on %s: %w: %s", b.addr, ctx.Err(), strings.TrimSpace(b.Log()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Running reports whether the current pgbouncer process is alive: false after it exited on its
// own (1.18 does, on a bug: "server_proto: server in bad state"), until Restart.
func (b *Bouncer) Running() bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Addr is the host:port pgbouncer listens on.
func (b *Bouncer) Addr() string { return b.addr }

// Version is the first line of `pgbouncer --version`, e.g. "PgBouncer 1.18.0".
func (b *Bouncer) Version() string { return b.version }

// Log is what pgbouncer wrote so far.
func (b *Bouncer) Log() string { return b.log.String() }

// URL is dbURL (a postgres:// URL or a keyword/value string) pointed at pgbouncer instead of
// the server; the rest (user, password, database, options) stays.
func (b *Bouncer) URL(dbURL string) (string, error) {
	host, port, _ := net.SplitHostPort(b.addr)
	if strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://") {
		u, err := url.Parse(dbURL)
		if err != nil {
			return "", fmt.Errorf("pgbouncer: parse database URL: %w", err)
		}
		u.Host = b.addr
		q := u.Query()
		q.Del("host")
		q.Del("port")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// Keyword/value form: a later keyword overrides an earlier one.
	return dbURL + " host=" + host + " port=" + port, nil
}

// Stop ends pgbouncer (SIGTERM, then SIGKILL after 5 s or when ctx ends) and removes its
// directory.
func (b *Bouncer) Stop(ctx context.Context) error {
	defer os.RemoveAll(b.dir)
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("pgbouncer: did not stop on SIGTERM; killed")
}

// writeOwned writes a file and gives it to cred's user (nil: ourselves).
func writeOwned(path string, data []byte, perm os.FileMode, cred *syscall.Credential) error {
	if err := os.WriteFile(path, data, perm); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	if cred != nil {
		if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgbouncer: give %s to the postgres OS user: %w", path, err)
		}
	}
	return nil
}

// quote is the auth file's quoting: "…" with " doubled.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func freePort() (int, error) {
	port, err := freeport.Get()
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: %w", err)
	}
	return port, nil
}

// lockedBuffer collects the process's output (written by exec's copying goroutine, read by us).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 1<<20 {
		return len(p), nil // enough to diagnose; do not grow without bound
	}
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

package pgcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// etcdServer is the one-member etcd of a Patroni cluster. Its ports are picked once and kept
// across a stop and start, so the Patroni configurations (and proxies) stay valid.
type etcdServer struct {
	bin, dataDir, logFile string
	client, peer          int

	mu     sync.Mutex
	daemon *daemon
}

func (e *etcdServer) layout(dir string) error {
	e.dataDir, e.logFile = filepath.Join(dir, "etcd"), filepath.Join(dir, "etcd.log")
	var err error
	if e.client, err = freePort(); err != nil {
		return err
	}
	e.peer, err = freePort()
	return err
}

func (e *etcdServer) clientAddr() string { return hostPort(e.client) }

// start starts etcd (on its data directory, which keeps the keys across a restart) and waits
// until it is healthy. A port taken meanwhile by someone else fails the start.
func (e *etcdServer) start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.daemon != nil && e.daemon.alive() {
		return nil
	}
	client, peer := "http://"+hostPort(e.client), "http://"+hostPort(e.peer)
	cmd := exec.Command(e.bin, "--name", "e0", "--data-dir", e.dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "e0="+peer,
		"--logger", "zap", "--log-level", "warn")
	cmd.Env = os.Environ()
	d, err := startDaemon(cmd, e.logFile)
	if err != nil {
		return fmt.Errorf("pgcluster: start etcd: %w", err)
	}
	e.daemon = d
	err = poll(ctx, time.Minute, func() (bool, error) {
		if !d.alive() {
			return false, fmt.Errorf("etcd exited: %s", strings.TrimSpace(readFrom(e.logFile, max(fileSize(e.logFile)-1024, 0))))
		}
		body, err := httpGet(ctx, client+"/health")
		return err == nil && strings.Contains(string(body), `"true"`), err
	}, "etcd to be healthy")
	if err != nil {
		d.kill()
	}
	return err
}

// stop kills etcd (SIGKILL) and returns when the signal was sent (zero if it was not running).
func (e *etcdServer) stop() time.Time {
	e.mu.Lock()
	d := e.daemon
	e.mu.Unlock()
	if d == nil || !d.alive() {
		return time.Time{}
	}
	return d.kill()
}

// StopEtcd kills etcd (SIGKILL): every Patroni loses the DCS. It returns when the signal was
// sent. StartEtcd brings it back with its keys.
func (p *Patroni) StopEtcd() (time.Time, error) {
	at := p.etcd.stop()
	if at.IsZero() {
		return at, fmt.Errorf("pgcluster: etcd is not running")
	}
	return at, nil
}

// StartEtcd starts etcd again on its ports and data directory, and waits until it is healthy.
func (p *Patroni) StartEtcd(ctx context.Context) error { return p.etcd.start(ctx) }

// httpGet returns the body of a GET of u, with a timeout of 2 s.
func httpGet(ctx context.Context, u string) ([]byte, error) {
	code, body, err := httpGetStatus(ctx, u)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET %s: %d: %s", u, code, strings.TrimSpace(string(body)))
	}
	return body, err
}

func httpGetStatus(ctx context.Context, u string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The faults and repairs of a Pair: the primary's death, the standby's promotion, a new standby,
// and a replication link held back so that an asynchronous standby misses commits.

// KillPrimary kills every process of the primary server with SIGKILL, as if its machine died:
// the postmaster and its children are first stopped (SIGSTOP, so that none forks or sends
// another byte), then killed. It returns when they are gone, with the instant the SIGKILLs were
// sent. The data directory is kept (Killed, Inspect); its port is free for RebuildStandby.
func (p *Pair) KillPrimary(ctx context.Context) (time.Time, error) {
	p.mu.Lock()
	c := p.primary
	p.mu.Unlock()
	if c == nil {
		return time.Time{}, errors.New("pgcluster: no primary to kill")
	}
	pid, _, ok := c.livePostmaster()
	if !ok {
		return time.Time{}, fmt.Errorf("pgcluster: the primary on port %d is not running", c.Port())
	}
	pids := freezeAndKill(pid)
	at := time.Now()
	p.mu.Lock()
	p.primary = nil
	p.killed = append(p.killed, c)
	if containsInt(pids, p.paused) {
		p.paused = 0
	}
	p.mu.Unlock()
	return at, waitGone(ctx, pids)
}

// freezeAndKill kills a postmaster and its children with SIGKILL, as if its machine died: they
// are first stopped (SIGSTOP, so that none forks or sends another byte), then killed. It returns
// the pids signalled.
func freezeAndKill(pid int) []int {
	pids := []int{pid}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	// Twice: a child forked while the postmaster was being stopped is found the second time.
	for range 2 {
		for _, ch := range childrenOf(pid) {
			_ = syscall.Kill(ch, syscall.SIGSTOP)
			if !containsInt(pids, ch) {
				pids = append(pids, ch)
			}
		}
	}
	for _, q := range pids {
		_ = syscall.Kill(q, syscall.SIGKILL)
	}
	return pids
}

// waitGone waits until none of pids is alive.
func waitGone(ctx context.Context, pids []int) error {
	return poll(ctx, 30*time.Second, func() (bool, error) {
		for _, q := range pids {
			if processLive(q) {
				return false, fmt.Errorf("pid %d still alive", q)
			}
		}
		return true, nil
	}, "the killed server's processes to exit")
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(n); ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// procStat reads the parent pid and the state letter of pid from /proc/<pid>/stat; ppid is -1 if
// the process does not exist.
func procStat(pid int) (ppid int, state byte) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1, 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces and parentheses
	if i < 0 || len(s) < i+4 {
		return -1, 0
	}
	fields := strings.Fields(s[i+2:])
	if len(fields) < 2 {
		return -1, 0
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return -1, 0
	}
	return ppid, fields[0][0]
}

// processLive reports whether pid exists and is not a zombie (nobody may reap the orphans of a
// killed postmaster when PID 1 does not).
func processLive(pid int) bool {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return processExists(pid)
	}
	ppid, state := procStat(pid)
	return ppid >= 0 && state != 'Z' && state != 'X'
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Promote promotes the standby (pg_ctl promote) and returns once it accepts writes, with the
// instant it began to: it polls pg_is_in_recovery() every 5 ms on a connection opened before
// the promotion, and returns the send time of the last poll that found recovery in progress (no
// write can have committed on it before; the first could commit within one poll after). The
// standby becomes the primary; there is no standby until RebuildStandby. Called while the old
// primary still runs, it makes two primaries: the caller kills the old one first.
func (p *Pair) Promote(ctx context.Context) (time.Time, error) {
	p.mu.Lock()
	sb := p.standby
	p.mu.Unlock()
	if sb == nil {
		return time.Time{}, errors.New("pgcluster: no standby to promote")
	}
	cctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	conn, err := pgx.Connect(cctx, sb.URL()+"&connect_timeout=5")
	if err != nil {
		return time.Time{}, fmt.Errorf("pgcluster: connect to the standby: %w", err)
	}
	defer conn.Close(context.Background())
	writable := time.Now()
	out, err := sb.PgCtl(ctx, "promote", "-W", "-D", sb.dataDir)
	if err != nil {
		return time.Time{}, fmt.Errorf("pgcluster: pg_ctl promote: %w: %s", err, strings.TrimSpace(string(out)))
	}
	for {
		sent := time.Now()
		var inRecovery bool
		if err := conn.QueryRow(cctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			return time.Time{}, fmt.Errorf("pgcluster: wait for the promotion: %w", err)
		}
		if !inRecovery {
			break
		}
		writable = sent
		select {
		case <-cctx.Done():
			return time.Time{}, fmt.Errorf("pgcluster: wait for the promotion: %w", cctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	// A session opened during recovery may write once it ended.
	if _, err := conn.Exec(cctx, "SELECT pg_current_xact_id()"); err != nil {
		return time.Time{}, fmt.Errorf("pgcluster: write on the promoted standby: %w", err)
	}
	p.mu.Lock()
	p.primary, p.standby = sb, nil
	p.mu.Unlock()
	return writable, nil
}

// RebuildStandby makes a new standby of the current primary (pg_basebackup into a new directory)
// on the port of the primary killed last, so that URL reaches it, and waits until it streams (in
// Synchronous mode, as the synchronous standby).
func (p *Pair) RebuildStandby(ctx context.Context) error {
	p.mu.Lock()
	if p.standby != nil {
		p.mu.Unlock()
		return errors.New("pgcluster: the pair has a standby already")
	}
	if p.primary == nil {
		p.mu.Unlock()
		return errors.New("pgcluster: no primary to rebuild a standby from (promote the standby first)")
	}
	port := p.ports[0]
	if p.primary.Port() == port {
		port = p.ports[1]
	}
	p.mu.Unlock()
	return p.attachStandby(ctx, port)
}

// PauseReplication stops the primary's walsender (SIGSTOP): the standby receives nothing more
// until ResumeReplication, while an asynchronous primary goes on committing; commits made in the
// meantime reach the standby only if replication resumes before the primary dies. (In
// Synchronous mode commits wait instead.) Pausing the standby's replay (pg_wal_replay_pause)
// would not do: a promotion replays every WAL record the standby has received.
func (p *Pair) PauseReplication(ctx context.Context) error {
	p.mu.Lock()
	c, paused := p.primary, p.paused
	p.mu.Unlock()
	if c == nil {
		return errors.New("pgcluster: no primary")
	}
	if paused != 0 {
		return errors.New("pgcluster: replication is paused already")
	}
	var pid int
	err := withNode(ctx, c, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pid FROM pg_stat_replication WHERE state = 'streaming' ORDER BY pid LIMIT 1`).Scan(&pid)
	})
	if err != nil {
		return fmt.Errorf("pgcluster: find the walsender: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgcluster: stop walsender %d: %w", pid, err)
	}
	p.mu.Lock()
	p.paused = pid
	p.mu.Unlock()
	return nil
}

// ResumeReplication continues the walsender PauseReplication stopped (a no-op if none is, or if
// its primary was killed since).
func (p *Pair) ResumeReplication() {
	p.mu.Lock()
	pid := p.paused
	p.paused = 0
	p.mu.Unlock()
	if pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// WaitCaughtUp waits until the standby has replayed everything the primary had written when it
// was called.
func (p *Pair) WaitCaughtUp(ctx context.Context) error {
	p.mu.Lock()
	primary, sb := p.primary, p.standby
	p.mu.Unlock()
	if primary == nil || sb == nil {
		return errors.New("pgcluster: no primary and standby")
	}
	var lsn string
	if err := withNode(ctx, primary, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	}); err != nil {
		return err
	}
	return poll(ctx, readyTimeout, func() (bool, error) {
		var ok bool
		err := withNode(ctx, sb, func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", lsn).Scan(&ok)
		})
		return ok, err
	}, "the standby to replay "+lsn)
}

// Timeline is the timeline of the node's current WAL position (the primary's: read from
// pg_walfile_name(pg_current_wal_lsn()), as the library does).
func Timeline(ctx context.Context, c *Cluster) (int, error) {
	var name string
	if err := withNode(ctx, c, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&name)
	}); err != nil {
		return 0, err
	}
	tl, err := strconv.ParseInt(name[:8], 16, 64)
	return int(tl), err
}

// Inspect starts a killed primary's data directory alone, on a new free port that no URL of the
// pair names (clients of the pair never reach it), and returns it: its crash recovery replays
// what it had committed, so a test can read the history the failover lost. Close stops it.
func (p *Pair) Inspect(ctx context.Context, c *Cluster) (*Cluster, error) {
	p.mu.Lock()
	known := containsCluster(p.killed, c)
	p.mu.Unlock()
	if !known {
		return nil, errors.New("pgcluster: Inspect takes a primary KillPrimary killed")
	}
	if err := startOnFreePort(ctx, c, p.ports[:]...); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.started = append(p.started, c)
	p.mu.Unlock()
	return c, nil
}

// startOnFreePort starts c on a new free port other than avoid, trying three ports.
func startOnFreePort(ctx context.Context, c *Cluster, avoid ...int) error {
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		if containsInt(avoid, port) {
			continue
		}
		// Start reads the port from state.json: write the new one there first.
		c.setPort(port)
		if err := c.updateState(func(*state) {}); err != nil {
			return err
		}
		err = c.Start(ctx)
		if err == nil || attempt == 2 {
			return err
		}
	}
}

func containsCluster(s []*Cluster, c *Cluster) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}

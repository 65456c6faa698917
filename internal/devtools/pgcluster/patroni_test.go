package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// newTestPatroni builds a Patroni cluster in a directory of its own and closes it at the end,
// checking that nothing of it is left running. Without patroni, etcd or the server binaries it
// skips, but fails under CI.
func newTestPatroni(t *testing.T, mode ReplicationMode) *Patroni {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgcluster-patroni-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres OS user must reach it
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p, err := NewPatroni(ctx, &PatroniOptions{Dir: dir, Mode: mode})
	if errors.Is(err, ErrNoPatroni) || errors.Is(err, ErrNoBinaries) {
		os.RemoveAll(dir)
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %v", err)
		}
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Close(ctx))
		for _, n := range p.nodes {
			_, ok := postmasterOf(n.dataDir)
			require.False(t, ok, "the server of %s still runs", n.Name)
			require.False(t, n.PatroniRunning(), "the Patroni of %s still runs", n.Name)
		}
		require.False(t, p.etcd.daemon.alive(), "etcd still runs")
		if t.Failed() {
			t.Logf("Patroni cluster kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return p
}

func patroniCount(t *testing.T, url string) int {
	t.Helper()
	var n int
	_, err := fmt.Sscan(query(t, url, "SELECT count(*)::text FROM t"), &n)
	require.NoError(t, err)
	return n
}

// TestPatroniHarness walks the harness through its faults in strict synchronous mode: a planned
// switchover, a postmaster restarted in place, and a leader whose Patroni died: its primary's
// commits wait, another node takes over after the ttl, and the old leader, rewound once its
// Patroni is back, leaves a copy that still holds the commit it made alone.
func TestPatroniHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("Patroni cluster test skipped in -short mode")
	}
	if os.Getenv("TASKLING_CHAOS") != "long" {
		t.Skip("the Patroni harness test runs under make chaos (TASKLING_CHAOS=long); make test runs the chaos smoke test")
	}
	t.Parallel()
	ctx := context.Background()
	p := newTestPatroni(t, Synchronous)
	url := p.URL("postgres")
	first, err := p.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "n0", first.Name, "the first node bootstraps the cluster")
	execSQL(t, url, "CREATE TABLE t (i int)")
	execSQL(t, url, "INSERT INTO t SELECT generate_series(1, 100)")
	require.Equal(t, "on", query(t, first.URL(), "SHOW synchronous_commit"))
	require.NotEmpty(t, query(t, first.URL(), "SHOW synchronous_standby_names"))

	// A planned switchover to the synchronous standby.
	var cand *PatroniNode
	for _, n := range p.Nodes() {
		if st, err := n.Status(ctx); err == nil && st.SyncStandby {
			cand = n
		}
	}
	require.NotNil(t, cand, "a synchronous standby")
	require.NoError(t, p.Switchover(ctx, first, cand))
	second, err := p.WaitLeader(ctx, 30*time.Second, first)
	require.NoError(t, err)
	require.Same(t, cand, second)
	require.NoError(t, p.WaitHealthy(ctx, time.Minute))
	require.Equal(t, 100, patroniCount(t, url))
	st, err := second.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Timeline)

	// A killed postmaster is restarted in place, on a new timeline.
	pid := second.PostmasterPID()
	_, err = second.KillPostmaster(ctx)
	require.NoError(t, err)
	require.NoError(t, p.WaitHealthy(ctx, time.Minute))
	l, err := p.Leader(ctx)
	require.NoError(t, err)
	require.Same(t, second, l, "restarted in place")
	require.NotEqual(t, pid, second.PostmasterPID())
	st, err = second.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Timeline)
	execSQL(t, url, "INSERT INTO t VALUES (101)")

	// A killed Patroni: its primary runs on, and its commits wait for a standby that leaves.
	_, err = second.KillPatroni()
	require.NoError(t, err)
	third, err := p.WaitLeader(ctx, PatroniTTL+20*time.Second, second)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	conn, err := pgx.Connect(cctx, second.URL())
	require.NoError(t, err)
	_, err = conn.Exec(cctx, "INSERT INTO t VALUES (102)")
	cancel()
	require.Error(t, err, "a commit on the old primary waits for its synchronous standby")
	conn.Close(ctx)
	require.Equal(t, 101, patroniCount(t, third.URL()))
	require.Empty(t, mustCopies(t, p))
	require.NoError(t, second.StartPatroni())
	require.NoError(t, p.WaitHealthy(ctx, 2*time.Minute))
	copies := mustCopies(t, p)
	require.Len(t, copies, 1, "the old leader was rewound once")
	require.Equal(t, second.Name, copies[0].Node)
	c, err := p.Inspect(ctx, copies[0])
	require.NoError(t, err)
	require.Equal(t, 102, patroniCount(t, c.URL()), "the copy holds the commit made on the old primary alone")
	require.Equal(t, 101, patroniCount(t, url))
	require.Equal(t, "false", query(t, c.URL(), "SELECT pg_is_in_recovery()::text"))

	// etcd down: the leader demotes itself; back, a leader again.
	_, err = p.StopEtcd()
	require.NoError(t, err)
	require.NoError(t, poll(ctx, 30*time.Second, func() (bool, error) {
		_, err := p.Leader(ctx)
		return err != nil, nil
	}, "the leader to step down"))
	require.NoError(t, p.StartEtcd(ctx))
	require.NoError(t, p.WaitHealthy(ctx, 2*time.Minute))
	require.Equal(t, 101, patroniCount(t, url))
	require.True(t, p.etcd.daemon.alive())
	require.NoError(t, syscall.Kill(p.etcd.daemon.cmd.Process.Pid, 0))
}

func mustCopies(t *testing.T, p *Patroni) []RewoundCopy {
	t.Helper()
	c, err := p.Copies()
	require.NoError(t, err)
	return c
}

func TestPatroniOptionsAreChecked(t *testing.T) {
	t.Parallel()
	_, err := NewPatroni(context.Background(), nil)
	require.ErrorContains(t, err, "needs a directory")
	_, err = NewPatroni(context.Background(), &PatroniOptions{Dir: t.TempDir(), Mode: "semi"})
	require.ErrorContains(t, err, `unknown replication mode "semi"`)
}

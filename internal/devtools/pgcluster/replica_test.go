package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// newTestPair builds a pair in a directory of its own and closes it at the end. Without the
// server binaries or pg_basebackup it skips, but fails under CI.
func newTestPair(t *testing.T, mode ReplicationMode) *Pair {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgcluster-pair-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres OS user must reach it
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := NewPair(ctx, &PairOptions{Dir: dir, Mode: mode})
	if errors.Is(err, ErrNoBinaries) || errors.Is(err, ErrNoBasebackup) {
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
		os.RemoveAll(dir)
	})
	return p
}

func pairExec(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(t, err)
}

func pairCount(t *testing.T, url string) int {
	t.Helper()
	n, err := strconv.Atoi(query(t, url, "SELECT count(*)::text FROM t"))
	require.NoError(t, err)
	return n
}

func postmasterPid(t *testing.T, c *Cluster) int {
	t.Helper()
	pid, _, ok := c.livePostmaster()
	require.True(t, ok, "postmaster of %s", c.dir)
	return pid
}

func TestPairSynchronousFailoverKeepsEveryCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newTestPair(t, Synchronous)
	url := p.URL("postgres")
	first, second := p.Primary(), p.Standby()
	require.Equal(t, "*", query(t, first.URL(), "SHOW synchronous_standby_names"))
	require.Equal(t, "", query(t, second.URL(), "SHOW synchronous_standby_names"), "the standby must not inherit the setting")
	require.Equal(t, "sync", query(t, first.URL(), "SELECT sync_state FROM pg_stat_replication"))

	pairExec(t, url, "CREATE TABLE t (i int)")
	pairExec(t, url, "INSERT INTO t SELECT generate_series(1, 100)")
	require.Equal(t, "true", query(t, second.URL(), "SELECT pg_is_in_recovery()::text"))
	tl, err := Timeline(ctx, first)
	require.NoError(t, err)
	require.Equal(t, 1, tl)

	oldPid := postmasterPid(t, first)
	children := childrenOf(oldPid)
	require.NotEmpty(t, children)
	killed, err := p.KillPrimary(ctx)
	require.NoError(t, err)
	require.False(t, processLive(oldPid))
	for _, ch := range children {
		require.False(t, processLive(ch), "child %d of the killed postmaster", ch)
	}
	writable, err := p.Promote(ctx)
	require.NoError(t, err)
	require.True(t, writable.After(killed))
	t.Logf("kill → writable: %s", writable.Sub(killed).Round(time.Millisecond))
	require.Same(t, second, p.Primary())
	require.Nil(t, p.Standby())
	require.Equal(t, 100, pairCount(t, url), "a synchronous standby has every acknowledged commit")
	tl, err = Timeline(ctx, second)
	require.NoError(t, err)
	require.Equal(t, 2, tl)
	pairExec(t, url, "INSERT INTO t VALUES (101)") // no synchronous standby to wait for

	require.NoError(t, p.RebuildStandby(ctx))
	third := p.Standby()
	require.Equal(t, first.Port(), third.Port(), "the new standby takes the dead primary's port")
	require.Equal(t, "*", query(t, second.URL(), "SHOW synchronous_standby_names"))
	pairExec(t, url, "INSERT INTO t VALUES (102)")
	require.NoError(t, p.WaitCaughtUp(ctx))
	require.Equal(t, 102, pairCount(t, third.URL()))

	// A second failover, back to the first port.
	_, err = p.KillPrimary(ctx)
	require.NoError(t, err)
	_, err = p.Promote(ctx)
	require.NoError(t, err)
	require.Equal(t, 102, pairCount(t, url))
	tl, err = Timeline(ctx, third)
	require.NoError(t, err)
	require.Equal(t, 3, tl)
	require.Len(t, p.Killed(), 2)
}

func TestPairAsynchronousFailoverLosesWhatTheStandbyMissed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newTestPair(t, Asynchronous)
	url := p.URL("postgres")
	require.Equal(t, "", query(t, p.Primary().URL(), "SHOW synchronous_standby_names"))
	pairExec(t, url, "CREATE TABLE t (i int)")
	pairExec(t, url, "INSERT INTO t VALUES (1)")
	require.NoError(t, p.WaitCaughtUp(ctx))

	// A paused replay loses nothing: the promotion replays what was received.
	pairExec(t, p.Standby().URL(), "SELECT pg_wal_replay_pause()")
	pairExec(t, url, "INSERT INTO t VALUES (2)")
	time.Sleep(200 * time.Millisecond) // let it be streamed
	require.Equal(t, 1, pairCount(t, p.Standby().URL()), "replay is paused")
	_, err := p.KillPrimary(ctx)
	require.NoError(t, err)
	_, err = p.Promote(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, pairCount(t, url))

	// A paused walsender loses the commits made meanwhile.
	require.NoError(t, p.RebuildStandby(ctx))
	require.NoError(t, p.WaitCaughtUp(ctx))
	require.NoError(t, p.PauseReplication(ctx))
	pairExec(t, url, "INSERT INTO t VALUES (3)") // async: returns without the standby
	lostOn := p.Primary()
	_, err = p.KillPrimary(ctx)
	require.NoError(t, err)
	_, err = p.Promote(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, pairCount(t, url), "the commit the standby never received is lost")

	// The killed primary still has it: Inspect starts it alone, on a port the URL does not name.
	killed := p.Killed()
	require.Len(t, killed, 2)
	require.Same(t, lostOn, killed[1])
	c, err := p.Inspect(ctx, lostOn)
	require.NoError(t, err)
	require.NotContains(t, url, fmt.Sprintf(":%d", c.Port()))
	require.Equal(t, 3, pairCount(t, c.URL()))
	require.Equal(t, 2, pairCount(t, url))
}

func TestPairOptionsAreChecked(t *testing.T) {
	t.Parallel()
	_, err := NewPair(context.Background(), nil)
	require.ErrorContains(t, err, "needs a directory")
	_, err = NewPair(context.Background(), &PairOptions{Dir: filepath.Join(os.TempDir(), "x"), Mode: "semi"})
	require.ErrorContains(t, err, `unknown replication mode "semi"`)
}

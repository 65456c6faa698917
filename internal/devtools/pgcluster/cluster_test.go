package pgcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/testutil"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// testOptions gives a test its own cluster directory, so that stopping and crashing it never
// disturbs the shared cluster other packages' tests use, and removes it (stopped) at the end.
func testOptions(t *testing.T) *Options {
	t.Helper()
	// Not t.TempDir: its 0700 parent would shut out the postgres OS user when we are root.
	dir, err := os.MkdirTemp("", "pgcluster-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	opts := &Options{Dir: filepath.Join(dir, "pg")}
	t.Cleanup(func() {
		if c, err := Open(opts); err == nil {
			_ = c.StopMode(context.Background(), StopImmediate)
		}
		os.RemoveAll(dir)
	})
	return opts
}

func query(t *testing.T, url, sql string, args ...any) (out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&out))
	return out
}

func execSQL(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

func postmasterStart(t *testing.T, c *Cluster) string {
	return query(t, c.URL(), "SELECT pg_postmaster_start_time()::text")
}

func TestEnsureStartsThenReuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := testOptions(t)

	c1, err := Ensure(ctx, opts)
	require.NoError(t, err)
	require.True(t, c1.Started())
	require.NotZero(t, c1.Port())
	require.Regexp(t, fmt.Sprintf(`^postgres://postgres:[0-9a-f]{48}@127\.0\.0\.1:%d/postgres\?sslmode=disable$`, c1.Port()), c1.URL())
	require.Equal(t, "1", query(t, c1.URL(), "SELECT 1::text"))
	require.Equal(t, "400", query(t, c1.URL(), "SHOW max_connections"))
	require.Equal(t, "on", query(t, c1.URL(), "SHOW fsync"))
	require.Equal(t, "UTF8", query(t, c1.URL(), "SHOW server_encoding"))
	require.True(t, samePath(c1.DataDir(), query(t, c1.URL(), "SHOW data_directory")))
	started := postmasterStart(t, c1)

	var st state
	b, err := os.ReadFile(filepath.Join(opts.Dir, "state.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &st))
	require.Equal(t, c1.Port(), st.Port)
	require.Equal(t, c1.URL(), st.URL)

	c2, err := Ensure(ctx, opts)
	require.NoError(t, err)
	require.False(t, c2.Started(), "the second Ensure must reuse the running server")
	require.Equal(t, c1.Port(), c2.Port())
	require.Equal(t, started, postmasterStart(t, c2), "the server must not have restarted")
}

func TestConcurrentEnsureStartsOneServer(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	const n = 6
	var wg sync.WaitGroup
	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { clusters[i], errs[i] = Ensure(context.Background(), opts) })
	}
	wg.Wait()
	starters := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, clusters[0].Port(), clusters[i].Port())
		if clusters[i].Started() {
			starters++
		}
	}
	require.Equal(t, 1, starters)
}

func TestStopThenStartKeepsPortAndData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := testOptions(t)
	c, err := Ensure(ctx, opts)
	require.NoError(t, err)
	port := c.Port()
	execSQL(t, c.URL(), "CREATE TABLE kept AS SELECT 'yes'::text AS v")

	for _, mode := range []StopMode{StopImmediate, StopFast} {
		require.NoError(t, c.StopMode(ctx, mode), mode)
		require.False(t, c.Running(ctx), mode)
		_, err := pgx.Connect(ctx, c.URL())
		require.Error(t, err, "server still answers after stop -m %s", mode)
		require.NoError(t, c.StopMode(ctx, mode), "stopping a stopped cluster is no error")

		require.NoError(t, c.Start(ctx), mode)
		require.Equal(t, port, c.Port(), mode)
		require.True(t, c.Running(ctx), mode)
		require.Equal(t, "yes", query(t, c.URL(), "SELECT v FROM kept"), mode)
	}

	require.NoError(t, c.Restart(ctx, StopImmediate))
	require.Equal(t, port, c.Port())
	require.Equal(t, "yes", query(t, c.URL(), "SELECT v FROM kept"))

	require.ErrorContains(t, c.StopMode(ctx, "sideways"), "unknown stop mode")
}

func TestEnsureRecoversFromCrashAndStalePidFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := testOptions(t)
	c, err := Ensure(ctx, opts)
	require.NoError(t, err)
	port := c.Port()

	// kill -9 of the postmaster: its pid file stays behind, naming a dead process.
	pid, _, ok := c.livePostmaster()
	require.True(t, ok)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return !processExists(pid) || isZombie(pid) }, 10*time.Second, 10*time.Millisecond)
	require.FileExists(t, filepath.Join(c.DataDir(), "postmaster.pid"))

	c2, err := Ensure(ctx, opts)
	require.NoError(t, err)
	require.True(t, c2.Started())
	require.Equal(t, port, c2.Port(), "a restart keeps the port when it is free")
	require.Equal(t, "1", query(t, c2.URL(), "SELECT 1::text"))

	// A pid file left by a server that did not stop cleanly, whose pid now belongs to another
	// live process of the server's OS user (after a reboot or in a container): PostgreSQL alone
	// would refuse to start ("lock file already exists").
	pidFile := filepath.Join(c.DataDir(), "postmaster.pid")
	content, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	require.NoError(t, c2.Stop(ctx))
	squatter := c2.Command(ctx, "sleep", "60")
	require.NoError(t, squatter.Start())
	t.Cleanup(func() { squatter.Process.Kill(); squatter.Wait() })
	lines := strings.Split(string(content), "\n")
	lines[0] = strconv.Itoa(squatter.Process.Pid)
	require.NoError(t, os.WriteFile(pidFile, []byte(strings.Join(lines, "\n")), 0o600))

	c3, err := Ensure(ctx, opts)
	require.NoError(t, err)
	require.True(t, c3.Started())
	require.Equal(t, "1", query(t, c3.URL(), "SELECT 1::text"))
}

// isZombie: a killed child of ours may linger unreaped (pg_ctl's sh is not our child, but be safe).
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}

func TestLeasesStopTheClusterWhenTheLastHolderLeaves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := testOptions(t)
	self, other := os.Getpid(), os.Getppid() // two live processes

	c, err := AcquireLease(ctx, opts, self)
	require.NoError(t, err)
	require.True(t, c.Started())
	c2, err := AcquireLease(ctx, opts, other)
	require.NoError(t, err)
	require.False(t, c2.Started())

	stopped, err := ReleaseLease(ctx, opts, self)
	require.NoError(t, err)
	require.False(t, stopped, "another holder still uses the cluster")
	require.True(t, c.Running(ctx))

	stopped, err = ReleaseLease(ctx, opts, other)
	require.NoError(t, err)
	require.True(t, stopped)
	require.False(t, c.Running(ctx))

	// Started by hand (not under a lease): a lease holder that reused it leaves it running.
	_, err = Ensure(ctx, opts)
	require.NoError(t, err)
	_, err = AcquireLease(ctx, opts, self)
	require.NoError(t, err)
	stopped, err = ReleaseLease(ctx, opts, self)
	require.NoError(t, err)
	require.False(t, stopped)
	require.True(t, c.Running(ctx))
}

func TestMissingBinariesGiveAClearError(t *testing.T) {
	t.Parallel()
	_, err := Ensure(context.Background(), &Options{Dir: t.TempDir(), SearchPath: []string{t.TempDir()}})
	require.ErrorIs(t, err, ErrNoBinaries)
	require.EqualError(t, err, "pgcluster: PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin; install Debian's postgresql package or set TASKLING_DATABASE_URL")
}

func TestFindBinariesTakesBothFromOneDirectory(t *testing.T) {
	t.Parallel()
	onlyInitdb, both := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(onlyInitdb, "initdb"), filepath.Join(both, "initdb"), filepath.Join(both, "pg_ctl")} {
		require.NoError(t, os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755))
	}
	initdb, pgCtl, err := findBinaries([]string{"", onlyInitdb, both})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(both, "initdb"), initdb)
	require.Equal(t, filepath.Join(both, "pg_ctl"), pgCtl)
}

func TestMajorVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"pg_ctl (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n": "15",
		"pg_ctl (PostgreSQL) 17.2":                             "17",
		"pg_ctl (PostgreSQL) 18beta1":                          "18beta1",
		"pg_ctl (PostgreSQL) 9.6.24":                           "9.6",
	} {
		got, err := majorVersion(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := majorVersion("nonsense")
	require.Error(t, err)
}

func TestVersionOrderPutsNewestFirst(t *testing.T) {
	t.Parallel()
	require.True(t, versionLess("9.6", "10"))
	require.True(t, versionLess("15", "17"))
	require.False(t, versionLess("17", "15"))
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	require.Equal(t, `'/a b/it'\''s'`, shellQuote("/a b/it's"))
	require.Equal(t, `''`, shellQuote(""))
}

func TestUnknownStopModeIsRejectedBeforeTouchingAnything(t *testing.T) {
	t.Parallel()
	c := &Cluster{}
	err := c.StopMode(context.Background(), "gentle")
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrNoBinaries))
}

// A Cluster opened before another made the cluster must not judge it by what it read at Open
// (no password yet: an older, trust-auth cluster to replace). Found by CI: concurrent Ensures
// remade the cluster under each other, and one then failed to log in.
func TestStartOfAClusterOpenedBeforeItWasMadeReusesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := testOptions(t)
	early, err := Open(opts)
	require.NoError(t, err)
	first, err := Ensure(ctx, opts)
	require.NoError(t, err)
	require.True(t, first.Started())
	before := postmasterStart(t, first)

	require.NoError(t, early.Start(ctx))
	require.False(t, early.Started(), "the cluster was made again")
	require.Equal(t, before, postmasterStart(t, first), "the server must not have restarted")
	require.Equal(t, "1", query(t, first.URL(), "SELECT 1::text"), "the first caller's password still works")
	require.Equal(t, first.URL(), early.URL())
}

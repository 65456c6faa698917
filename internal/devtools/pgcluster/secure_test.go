package pgcluster

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestPrivateClusterNeedsItsPassword is issue 15 item 10: the cluster was made with
// `initdb --auth=trust` listening on 127.0.0.1, so any local user could connect as superuser.
func TestPrivateClusterNeedsItsPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := Ensure(ctx, testOptions(t))
	require.NoError(t, err)

	noPassword := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port())
	_, err = pgx.Connect(ctx, noPassword)
	require.ErrorContains(t, err, "password", "TCP connections need the password")
	if c.sockDir != "" {
		_, err = pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", c.sockDir, c.Port()))
		require.Error(t, err, "so does the Unix socket")
	}
	wrong, err := url.Parse(c.URL())
	require.NoError(t, err)
	wrong.User = url.UserPassword("postgres", "guess")
	_, err = pgx.Connect(ctx, wrong.String())
	require.ErrorContains(t, err, "password authentication failed")
	require.Equal(t, "1", query(t, c.URL(), "SELECT 1::text"))

	fi, err := os.Stat(c.pwFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the password file is private")
	fi, err = os.Stat(c.stateFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "state.json holds the URL: private too")
	require.Equal(t, "true", query(t, c.URL(), "SELECT rolreplication::text FROM pg_roles WHERE rolname = '"+replicationRole+"'"))
	require.Contains(t, c.ReplicationURL(), replicationRole+":")

	// A cluster made by an older version, with trust and no password, is replaced.
	require.NoError(t, os.Remove(c.pwFile))
	old, err := Open(&Options{Dir: c.dir})
	require.NoError(t, err)
	require.NoError(t, old.Start(ctx))
	require.Equal(t, "1", query(t, old.URL(), "SELECT 1::text"))
	require.NotEqual(t, c.URL(), old.URL(), "a new password")
}

// TestClusterDirectoryMustBeOursAndPrivate is issue 15 item 11: the fallback directory under
// the system's temp dir has a predictable name and was reused without checking its owner or mode,
// and files in it were written following symlinks.
func TestClusterDirectoryMustBeOursAndPrivate(t *testing.T) {
	t.Parallel()
	base := t.TempDir()

	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(base, link))
	require.ErrorContains(t, makePrivateDir(link), "symbolic link")

	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o777))
	require.NoError(t, os.Chmod(open, 0o777))
	require.ErrorContains(t, makePrivateDir(open), "writable by others")

	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		require.NoError(t, os.Mkdir(theirs, 0o755))
		require.NoError(t, os.Chown(theirs, 65534, 65534)) // nobody
		require.ErrorContains(t, makePrivateDir(theirs), "belongs to uid 65534")
	}

	fresh := filepath.Join(base, "fresh")
	require.NoError(t, makePrivateDir(fresh))
	fi, err := os.Lstat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	require.NoError(t, makePrivateDir(fresh), "ours: reused")

	// No write follows a symlink planted where a file should be.
	target := filepath.Join(base, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o644))
	planted := filepath.Join(fresh, "state.json.tmp")
	require.NoError(t, os.Symlink(target, planted))
	err = writeFileNoFollow(planted, []byte("clobbered"), 0o600)
	require.ErrorIs(t, err, syscall.ELOOP)
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "keep", strings.TrimSpace(string(b)))
}

// TestBaseBackupKeepsThePasswordOffItsCommandLine is issue 23 item 7: the replication password
// was in pg_basebackup's arguments, which ps shows to every local user. A stand-in records the
// arguments and environment it was given.
func TestBaseBackupKeepsThePasswordOffItsCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "pg_basebackup")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + shellQuote(filepath.Join(dir, "args")) +
		"\nenv > " + shellQuote(filepath.Join(dir, "env")) + "\ntouch \"$2/postgresql.auto.conf\"\n"
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o700))
	const pw = "0123456789abcdef0123456789abcdef"
	primary := &Cluster{dir: dir, port: 5999, password: pw}
	sb := &Cluster{dir: dir, dataDir: filepath.Join(dir, "data"), pwFile: filepath.Join(dir, "password")}
	p := &Pair{basebkup: fake}
	require.NoError(t, p.baseBackup(context.Background(), primary, sb, "node-2"))

	args, err := os.ReadFile(filepath.Join(dir, "args"))
	require.NoError(t, err)
	require.NotContains(t, string(args), pw, "no password among the arguments")
	require.Contains(t, string(args), "port=5999")
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	require.NoError(t, err)
	require.Contains(t, strings.Split(string(env), "\n"), "PGPASSWORD="+pw, "the password is in its environment")
}

// TestPrivateClusterFilesArePrivate is issue 23 item 7: postgres.log was created 0644, readable
// by every local user; a log left so by an older version is made private too, and so is the
// socket directory.
func TestPrivateClusterFilesArePrivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := testOptions(t)
	require.NoError(t, os.MkdirAll(opts.Dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(opts.Dir, "postgres.log"), nil, 0o644))
	require.NoError(t, os.Chmod(filepath.Join(opts.Dir, "postgres.log"), 0o644))
	c, err := Ensure(ctx, opts)
	require.NoError(t, err)
	fi, err := os.Stat(c.LogFile())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the server's log is private")
	if c.sockDir != "" {
		fi, err = os.Stat(c.sockDir)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the socket directory is the server's alone")
	}
	require.Equal(t, "1", query(t, c.URL(), "SELECT 1::text"))
}

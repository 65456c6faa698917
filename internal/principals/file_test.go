package principals

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// promptly is how long a call that must not wait on a FIFO may take before the test says it
// hangs: far more than it needs, so that a loaded machine does not fail it.
const promptly = 10 * time.Second

// TestAddAndRemoveKeepTheFilesModeLessWorldBits is issue 40's lock-out: a 0640 file read by the
// server through its group came back 0600 from tokens add. The mode stays, less world bits; a
// new file is 0600.
func TestAddAndRemoveKeepTheFilesModeLessWorldBits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ before, after os.FileMode }{{0o640, 0o640}, {0o660, 0o660}, {0o644, 0o640}, {0o666, 0o660}, {0o600, 0o600}, {0o400, 0o400}} {
		path := filepath.Join(t.TempDir(), "principals.toml")
		_, err := Add(path, "alice", RoleOperate)
		require.NoError(t, err)
		requireMode(t, path, 0o600)
		require.NoError(t, os.Chmod(path, c.before))
		_, err = Add(path, "bob", RoleRead)
		require.NoError(t, err)
		requireMode(t, path, c.after)
		require.NoError(t, os.Chmod(path, c.before))
		require.NoError(t, Remove(path, "alice"))
		requireMode(t, path, c.after)
	}
}

func requireMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, want, st.Mode().Perm(), "%s: mode %s", path, st.Mode())
}

// requireRoot skips a test that must give files another owner, unless run as root (as CI runs).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file another owner and group (CI runs as root)")
	}
}

// owner is a file's uid and gid.
func owner(t *testing.T, path string) [2]uint32 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	sys := st.Sys().(*syscall.Stat_t)
	return [2]uint32{sys.Uid, sys.Gid}
}

// TestAddAndRemoveKeepTheFilesOwnerAndGroup: a file root keeps for a server running as nobody
// stays nobody's after tokens add and remove as root.
func TestAddAndRemoveKeepTheFilesOwnerAndGroup(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.toml")
	_, err := Add(path, "alice", RoleOperate)
	require.NoError(t, err)
	require.Equal(t, [2]uint32{0, 0}, owner(t, path), "a new file is its maker's")
	for _, o := range [][2]int{{65534, 65534}, {0, 65534}, {65534, 0}} {
		require.NoError(t, os.Chown(path, o[0], o[1]))
		require.NoError(t, os.Chmod(path, 0o640))
		_, err = Add(path, "bob", RoleRead)
		require.NoError(t, err)
		require.Equal(t, [2]uint32{uint32(o[0]), uint32(o[1])}, owner(t, path))
		requireMode(t, path, 0o640)
		require.NoError(t, Remove(path, "bob"))
		require.Equal(t, [2]uint32{uint32(o[0]), uint32(o[1])}, owner(t, path))
		requireMode(t, path, 0o640)
	}
}

// TestARewriteThatCannotKeepTheOwnerWritesNothing: when the new file cannot be given the old
// one's owner and group (not root), nothing is written and the error says why, rather than
// leaving a file a server reading it as them could not read.
func TestARewriteThatCannotKeepTheOwnerWritesNothing(t *testing.T) {
	requireRoot(t) // to give the file an owner that differs from the temporary file's
	path := filepath.Join(t.TempDir(), "principals.toml")
	_, err := Add(path, "alice", RoleOperate)
	require.NoError(t, err)
	require.NoError(t, os.Chown(path, 65534, 65534))
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	chown = func(*os.File, int, int) error { return syscall.EPERM } // as a non-root user sees it
	t.Cleanup(func() { chown = (*os.File).Chown })

	_, err = Add(path, "bob", RoleRead)
	require.ErrorIs(t, err, syscall.EPERM)
	require.ErrorContains(t, err, "belongs to uid 65534, gid 65534")
	require.ErrorContains(t, err, "nothing was written")
	err = Remove(path, "alice")
	require.ErrorIs(t, err, syscall.EPERM)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, [2]uint32{65534, 65534}, owner(t, path))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}

// TestRemoveThroughASymlinkRewritesTheFileItNames: a server reading the file a symlink names
// must see the removal; the symlink used to be replaced by a new file, the old one kept.
func TestRemoveThroughASymlinkRewritesTheFileItNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target, link := filepath.Join(dir, "principals.toml"), filepath.Join(dir, "link.toml")
	_, err := Add(target, "alice", RoleOperate)
	require.NoError(t, err)
	require.NoError(t, os.Symlink("principals.toml", link))
	_, err = Add(link, "bob", RoleRead)
	require.NoError(t, err)
	require.NoError(t, Remove(link, "alice"))
	ps, err := Load(target)
	require.NoError(t, err)
	require.Equal(t, []string{"bob"}, names(ps))
	st, err := os.Lstat(link)
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, st.Mode().Type(), "still a symlink")
}

// inTime runs f (which asserts, in its own goroutine) and fails the test if it has not returned after promptly.
func inTime(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(promptly):
		t.Fatalf("%s still waits after %s", what, promptly)
	}
}

// TestAFIFOIsRefusedWithoutWaiting is issue 40's hang: a FIFO as the principals file blocked the
// open (for a writer that never comes) while the Source held its lock, and every authenticated
// request behind it. It is refused at once, naming the path.
func TestAFIFOIsRefusedWithoutWaiting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, fifo := filepath.Join(dir, "principals.toml"), filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	var once sync.Once
	t.Cleanup(func() { // release an open that waits (the old code), so that the test ends
		once.Do(func() {
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		})
	})

	inTime(t, "NewSource on a FIFO", func() {
		_, err := NewSource(fifo, "")
		assert.ErrorContains(t, err, fifo+" is not a regular file")
	})
	inTime(t, "Add and Remove on a FIFO", func() {
		_, err := Add(fifo, "alice", RoleRead)
		assert.ErrorContains(t, err, "not a regular file")
		assert.ErrorContains(t, Remove(fifo, "alice"), "not a regular file")
	})

	_, err := Add(path, "alice", RoleOperate)
	require.NoError(t, err)
	s, err := NewSource(path, "the single token of at least 32 bytes")
	require.NoError(t, err)
	now := time.Now()
	s.now = func() time.Time { return now }
	require.NoError(t, os.Rename(fifo, path))
	now = now.Add(CheckInterval)
	inTime(t, "Current on a FIFO", func() {
		set, change := s.Current()
		assert.NotNil(t, change)
		assert.Contains(t, change.Problem, path+" is not a regular file")
		assert.Equal(t, 1, set.Len(), "only the token's principal")
	})
}

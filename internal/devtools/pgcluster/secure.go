package pgcluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// The cluster's directory holds its password and state and is written by us (root, when the
// server runs as the postgres OS user): it must be ours, a real directory, and writable by
// nobody else, or another local user could plant a symlink there and have us write through it.

// secureDir checks the cluster's directory (repairing the ownership an older version gave the
// postgres OS user).
func (c *Cluster) secureDir() error {
	fi, err := os.Lstat(c.dir)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && c.cred != nil && st.Uid == c.cred.Uid && int(st.Uid) != os.Geteuid() {
		if err := os.Lchown(c.dir, os.Geteuid(), os.Getegid()); err != nil {
			return fmt.Errorf("pgcluster: take back %s from the postgres OS user: %w", c.dir, err)
		}
	}
	return checkPrivateDir(c.dir)
}

// checkPrivateDir refuses dir unless it is a directory (not a symlink), owned by us and not
// writable by group or others.
func checkPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("pgcluster: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("pgcluster: %s is a symbolic link; refusing to use it (remove it, or set %s)", dir, EnvDir)
	case !fi.IsDir():
		return fmt.Errorf("pgcluster: %s is not a directory", dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("pgcluster: %s is writable by others (mode %s); refusing to use it (remove it, or set %s)", dir, fi.Mode().Perm(), EnvDir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("pgcluster: %s belongs to uid %d, not to us (uid %d); refusing to use it (remove it, or set %s)", dir, st.Uid, os.Geteuid(), EnvDir)
	}
	return nil
}

// makePrivateDir creates dir (0755: the postgres OS user must traverse it) unless it exists, and
// checks it: the fallback under the shared temporary directory has a predictable name, so a
// directory someone else made there first is refused, never reused.
func makePrivateDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgcluster: create %s: %w", dir, err)
	} else if err == nil {
		if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
			return fmt.Errorf("pgcluster: chmod %s: %w", dir, err)
		}
	}
	return checkPrivateDir(dir)
}

// writeFileNoFollow writes a file that must not be a symlink; it refuses to follow one.
func writeFileNoFollow(path string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil { // an existing file keeps its mode otherwise
		f.Close()
		return fmt.Errorf("pgcluster: chmod %s: %w", path, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", path, err)
	}
	return nil
}

// newPassword makes a random password and keeps it in the 0600 password file.
func (c *Cluster) newPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pgcluster: random password: %w", err)
	}
	pw := hex.EncodeToString(b)
	if err := writeFileNoFollow(c.pwFile, []byte(pw+"\n"), 0o600); err != nil {
		return "", err
	}
	c.mu.Lock()
	c.password = pw
	c.mu.Unlock()
	return pw, nil
}

func (c *Cluster) readPassword() string {
	b, err := os.ReadFile(c.pwFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (c *Cluster) currentPassword() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.password
}

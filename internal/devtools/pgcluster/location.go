package pgcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// EnvDir overrides the cluster's directory.
const EnvDir = "TASKLING_PG_DIR"

// RepoRoot returns the nearest ancestor of the working directory that holds go.work, else the
// nearest that holds go.mod.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("pgcluster: working directory: %w", err)
	}
	var firstMod string
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fileExists(filepath.Join(dir, "go.work")) {
			return dir, nil
		}
		if firstMod == "" && fileExists(filepath.Join(dir, "go.mod")) {
			firstMod = dir
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	if firstMod == "" {
		return "", fmt.Errorf("pgcluster: no go.work or go.mod above %s; set %s", wd, EnvDir)
	}
	return firstMod, nil
}

// resolveDir picks the cluster directory: opts.Dir, $TASKLING_PG_DIR, <repo>/.taskling/pg, or
// the /tmp fallback when the server's OS user cannot traverse the repo path.
func resolveDir(opts *Options, cred *syscall.Credential, probe string) (string, error) {
	if opts.Dir != "" {
		return filepath.Abs(opts.Dir)
	}
	if d := os.Getenv(EnvDir); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if cred == nil || canEnter(root, cred, probe) {
		return filepath.Join(root, ".taskling", "pg"), nil
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), "taskling-pg-"+hex.EncodeToString(sum[:])[:12])
	if err := makePrivateDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// canEnter reports whether a process running with cred can chdir into dir. It asks the kernel
// (by starting probe there) rather than reading mode bits, so ACLs and groups count.
func canEnter(dir string, cred *syscall.Credential, probe string) bool {
	cmd := exec.Command(probe, "--version")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.Run() == nil
}

// serverCredential returns the identity to run initdb, pg_ctl and postgres with: nil (ourselves)
// unless we are root, which PostgreSQL refuses; then the postgres OS user.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, errors.New("pgcluster: running as root, and PostgreSQL refuses to run as root, but there is no 'postgres' OS user to run it as; install Debian's postgresql package or create the user (useradd --system postgres)")
		}
		return nil, fmt.Errorf("pgcluster: look up the postgres OS user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgcluster: postgres OS user has a non-numeric id: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

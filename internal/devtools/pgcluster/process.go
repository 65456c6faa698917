package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// PgCtl runs the cluster's pg_ctl with args as the server's OS user and returns its combined
// output. Tests use it for what the methods do not cover (say `status`, or `kill KILL`).
func (c *Cluster) PgCtl(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, c.pgCtl, args...)
}

// Command returns an exec.Cmd that runs name as the server's OS user (the postgres user when we
// are root), in the cluster's directory, with an environment free of PG* variables.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	// pg_ctl start leaves the postmaster running; never let a descendant that kept our pipes
	// open hang Wait.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	var out bytes.Buffer
	cmd := c.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// serverEnv is our environment without PG* variables (PGDATA, PGPORT… would change what
// pg_ctl and postgres do) and with C-locale messages, whose text startLocked inspects.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") || strings.HasPrefix(kv, "LANGUAGE=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// chown gives paths (not recursively) to the server's OS user; a no-op when that is us.
func (c *Cluster) chown(paths ...string) error {
	if c.cred == nil {
		return nil
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if err := os.Lchown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: give %s to the postgres OS user: %w", p, err)
		}
	}
	return nil
}

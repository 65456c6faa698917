package pgcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Leases let several concurrent `make` runs share the cluster: each run holds a lease (named by
// its process id) while it uses the cluster, and the cluster is stopped when the last lease is
// released — but only if a lease holder started it. A cluster someone started by hand or that
// an earlier plain `go test` left running stays up.

// AcquireLease ensures the cluster runs (as Ensure does) and records a lease for the process
// holder. If this call started the cluster, the cluster becomes managed: the last ReleaseLease
// stops it.
func AcquireLease(ctx context.Context, opts *Options, holder int) (*Cluster, error) {
	c, unlock, err := ensureUnderLock(ctx, opts, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := os.MkdirAll(c.leaseDir, 0o755); err != nil {
		return nil, fmt.Errorf("pgcluster: create %s: %w", c.leaseDir, err)
	}
	if err := os.WriteFile(c.leasePath(holder), nil, 0o644); err != nil {
		return nil, fmt.Errorf("pgcluster: write lease: %w", err)
	}
	return c, nil
}

// ReleaseLease drops holder's lease and leases of processes that no longer exist. It stops the
// cluster (fast) if a lease holder started it and no live lease remains, and reports whether it
// did.
func ReleaseLease(ctx context.Context, opts *Options, holder int) (stopped bool, err error) {
	c, err := Open(opts)
	if err != nil {
		return false, err
	}
	l, err := lockFile(ctx, c.lockPath)
	if err != nil {
		return false, err
	}
	defer l.unlock()
	os.Remove(c.leasePath(holder))
	if c.liveLeases() > 0 {
		return false, nil
	}
	st, err := c.readState()
	if err != nil || !st.Managed {
		return false, err
	}
	if err := c.stopLocked(ctx, StopFast); err != nil {
		return false, err
	}
	return true, c.updateState(func(s *state) { s.Managed = false })
}

func (c *Cluster) leasePath(holder int) string {
	return filepath.Join(c.leaseDir, strconv.Itoa(holder))
}

// liveLeases counts leases whose process still exists, removing the others.
func (c *Cluster) liveLeases() int {
	entries, _ := os.ReadDir(c.leaseDir)
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && pid > 0 && processExists(pid) {
			n++
			continue
		}
		os.Remove(filepath.Join(c.leaseDir, e.Name()))
	}
	return n
}

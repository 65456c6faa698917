package pgcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// The state and the faults of a Patroni cluster: a planned switchover, the death of a leader's
// postmaster, of its Patroni, and of etcd (patroni_etcd.go).

// NodeStatus is what a node's Patroni says of itself (its REST API's GET /leader).
type NodeStatus struct {
	// Leader: Patroni holds the leader lock (the request answered 200).
	Leader bool `json:"-"`
	// State is Patroni's view of its server: "running", "starting", "stopped", "crashed"…
	State string `json:"state"`
	// Role is "master" (writable) or "replica"; "demoted" while Patroni demotes it.
	Role     string `json:"role"`
	Timeline int    `json:"timeline"`
	// PostmasterStart changes when the server restarts.
	PostmasterStart string `json:"postmaster_start_time"`
	// SyncStandby: the leader's synchronous standby (synchronous_mode).
	SyncStandby     bool `json:"sync_standby"`
	ClusterUnlocked bool `json:"cluster_unlocked"`
	// Replication lists the leader's walsenders.
	Replication []struct {
		ApplicationName string `json:"application_name"`
		State           string `json:"state"`
		SyncState       string `json:"sync_state"`
	} `json:"replication"`
}

// Status asks the node's Patroni (REST API) about itself; an error means it does not answer.
func (n *PatroniNode) Status(ctx context.Context) (NodeStatus, error) {
	code, body, err := httpGetStatus(ctx, n.apiURL("/leader"))
	var st NodeStatus
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("pgcluster: status of %s: %w: %s", n.Name, err, body)
	}
	st.Leader = code == http.StatusOK
	return st, nil
}

// Leader is the node whose Patroni holds the leader lock and runs a writable server; an error
// if there is none (a failover in progress) or more than one claims it.
func (p *Patroni) Leader(ctx context.Context) (*PatroniNode, error) {
	var leaders []*PatroniNode
	for _, n := range p.nodes {
		if st, err := n.Status(ctx); err == nil && st.Leader && st.Role == "master" && st.State == "running" {
			leaders = append(leaders, n)
		}
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("pgcluster: %d nodes lead (%v)", len(leaders), leaders)
	}
	return leaders[0], nil
}

// WaitLeader waits up to timeout for a leader (Leader) other than not (nil: any).
func (p *Patroni) WaitLeader(ctx context.Context, timeout time.Duration, not *PatroniNode) (*PatroniNode, error) {
	var l *PatroniNode
	err := poll(ctx, timeout, func() (bool, error) {
		var err error
		l, err = p.Leader(ctx)
		return err == nil && l != not, err
	}, "a Patroni leader")
	return l, err
}

// HealthyErr says why the cluster is not healthy, nil if it is: one leader running a writable
// server, every other node's Patroni running a replica on the leader's timeline that streams
// from it, and in Synchronous mode one of them its synchronous standby.
func (p *Patroni) HealthyErr(ctx context.Context) error {
	var leader *PatroniNode
	var lst NodeStatus
	sts := map[*PatroniNode]NodeStatus{}
	for _, n := range p.nodes {
		st, err := n.Status(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		sts[n] = st
		if st.Leader {
			if leader != nil {
				return fmt.Errorf("%s and %s both lead", leader.Name, n.Name)
			}
			leader, lst = n, st
		}
	}
	if leader == nil || lst.Role != "master" || lst.State != "running" {
		return fmt.Errorf("no leader running a writable server (%s)", describe(sts))
	}
	streaming, sync := map[string]bool{}, map[string]bool{}
	for _, r := range lst.Replication {
		streaming[r.ApplicationName] = r.State == "streaming"
		sync[r.ApplicationName] = r.SyncState == "sync"
	}
	syncs := 0
	for n, st := range sts {
		if n == leader {
			continue
		}
		if st.State != "running" || st.Role != "replica" || st.Timeline != lst.Timeline || !streaming[n.Name] {
			return fmt.Errorf("%s is not a streaming replica on timeline %d (%s)", n.Name, lst.Timeline, describe(sts))
		}
		// Both the server's view and the DCS's (Patroni's /sync key, which a leader race reads).
		if sync[n.Name] && st.SyncStandby {
			syncs++
		}
	}
	if p.opts.Mode == Synchronous && syncs != 1 {
		return fmt.Errorf("%d synchronous standbys (%s)", syncs, describe(sts))
	}
	return nil
}

func describe(sts map[*PatroniNode]NodeStatus) string {
	var parts []string
	for n, st := range sts {
		parts = append(parts, fmt.Sprintf("%s: %s %s tl %d leader %v", n.Name, st.Role, st.State, st.Timeline, st.Leader))
	}
	return strings.Join(parts, "; ")
}

// WaitHealthy waits up to timeout until HealthyErr reports nothing.
func (p *Patroni) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, func() (bool, error) {
		err := p.HealthyErr(ctx)
		return err == nil, err
	}, "a healthy Patroni cluster")
}

// Patronictl runs patronictl with args against the cluster and returns its combined output.
func (p *Patroni) Patronictl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, p.patronictl, append([]string{"-c", p.ctlConfig}, args...)...)
	cmd.Env = serverEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Switchover is a planned switchover (`patronictl switchover --force`) from the leader to the
// candidate; it returns once patronictl reports it done.
func (p *Patroni) Switchover(ctx context.Context, leader, candidate *PatroniNode) error {
	out, err := p.Patronictl(ctx, "switchover", "--leader", leader.Name, "--candidate", candidate.Name, "--force")
	if err == nil && !bytes.Contains(out, []byte("Successfully switched over")) {
		err = errors.New("no success reported")
	}
	if err != nil {
		return fmt.Errorf("pgcluster: patronictl switchover %s → %s: %w: %s", leader.Name, candidate.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// KillPostmaster kills every process of the node's server with SIGKILL, as KillPrimary does, and
// returns when they are gone, with the instant the signals were sent. Its Patroni lives on.
func (n *PatroniNode) KillPostmaster(ctx context.Context) (time.Time, error) {
	pid, ok := postmasterOf(n.dataDir)
	if !ok {
		return time.Time{}, fmt.Errorf("pgcluster: the server of %s is not running", n.Name)
	}
	pids := freezeAndKill(pid)
	at := time.Now()
	return at, waitGone(ctx, pids)
}

// KillPatroni kills the node's Patroni (SIGKILL) and returns when the signal was sent. Its
// server runs on, as it was: a primary stays one.
func (n *PatroniNode) KillPatroni() (time.Time, error) {
	n.mu.Lock()
	d := n.daemon
	n.mu.Unlock()
	if d == nil || !d.alive() {
		return time.Time{}, fmt.Errorf("pgcluster: the Patroni of %s is not running", n.Name)
	}
	return d.kill(), nil
}

// PostmasterPID is the pid of the node's running postmaster (0 if none).
func (n *PatroniNode) PostmasterPID() int {
	pid, _ := postmasterOf(n.dataDir)
	return pid
}

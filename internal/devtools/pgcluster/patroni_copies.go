package pgcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RewoundCopy is a copy of a failed leader's data directory, taken right before Patroni rewound
// it (pg_rewind) to follow the new leader: what that leader had committed, the commits the new
// leader lacks included.
type RewoundCopy struct {
	Node string    // the node rewound
	At   time.Time // when the copy was taken
	Dir  string    // holds data/
}

// Copies lists the copies taken so far, oldest first.
func (p *Patroni) Copies() ([]RewoundCopy, error) {
	entries, err := os.ReadDir(p.copiesDir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	var out []RewoundCopy
	for _, e := range entries {
		node, stamp, ok := strings.Cut(e.Name(), "-")
		ns, err := strconv.ParseInt(stamp, 10, 64)
		if !ok || err != nil || !e.IsDir() {
			continue // a copy being made (.tmp), or not one
		}
		out = append(out, RewoundCopy{Node: node, At: time.Unix(0, ns), Dir: filepath.Join(p.copiesDir, e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

// Inspect starts a copy alone, on a new free port that no URL of the cluster names, as a
// primary of its own (it follows nobody and waits for no standby), and returns it: its recovery
// replays what its leader had written. Close stops it.
func (p *Patroni) Inspect(ctx context.Context, rc RewoundCopy) (*Cluster, error) {
	data := filepath.Join(rc.Dir, "data")
	var origin string
	for _, n := range p.nodes {
		if n.Name == rc.Node {
			origin = n.dataDir
		}
	}
	if origin == "" {
		return nil, fmt.Errorf("pgcluster: copy of unknown node %q", rc.Node)
	}
	// Patroni's postgresql.conf names the node's pg_hba.conf and pg_ident.conf: use the copy's.
	conf := filepath.Join(data, "postgresql.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := writeFileNoFollow(conf, []byte(strings.ReplaceAll(string(b), origin+"/", data+"/")), 0o600); err != nil {
		return nil, err
	}
	for _, f := range []string{"standby.signal", "recovery.signal"} {
		if err := os.Remove(filepath.Join(data, f)); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}
	if err := appendConf(filepath.Join(data, "postgresql.auto.conf"), "synchronous_standby_names = ''\nprimary_conninfo = ''\narchive_mode = 'off'"); err != nil {
		return nil, err
	}
	if err := writeFileNoFollow(filepath.Join(rc.Dir, "password"), []byte(p.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	c, err := Open(&Options{Dir: rc.Dir, SearchPath: p.opts.SearchPath})
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, n := range p.nodes {
		ports = append(ports, n.pgPort)
	}
	if err := startOnFreePort(ctx, c, ports...); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.inspected = append(p.inspected, c)
	p.mu.Unlock()
	return c, nil
}

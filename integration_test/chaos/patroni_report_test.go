package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"

	"github.com/taskling-go/taskling/integration_test/checker"
)

// faultFigures are the figures of one fault.
type faultFigures struct {
	firstGrant       time.Duration // from → the first grant on the new timeline (-1: none)
	lost, lostUnseen int           // grants lost in its switch: seen by a holder, not
	reused           int           // fences handed out again after it
	violations       int
}

// figuresOfFaults computes each fault's figures. A fault owns the grants made from its
// injection to the next fault's, and the violations about them.
func (r *patroniRun) figuresOfFaults(h checker.History, rep checker.Report) []faultFigures {
	holds := map[int64]bool{}
	for _, hd := range h.Holds {
		holds[hd.Exec] = true
	}
	grantAt := map[int64]time.Time{}
	for _, g := range h.Grants {
		grantAt[g.Exec] = g.GrantedAt
	}
	owner := func(at time.Time) int {
		i := sort.Search(len(r.faults), func(i int) bool { return r.faults[i].injected.After(at) })
		return i - 1
	}
	out := make([]faultFigures, len(r.faults))
	for i, f := range r.faults {
		ff := &out[i]
		ff.firstGrant = -1
		for _, g := range h.Grants {
			if !g.Lost && f.newTL != 0 && g.GrantedAt.After(f.writable) && (ff.firstGrant < 0 || g.GrantedAt.Sub(f.from) < ff.firstGrant) {
				ff.firstGrant = g.GrantedAt.Sub(f.from)
			}
		}
		if sw, ok := r.switchOf(f); ok {
			one := h
			one.Switches = []checker.Switch{sw}
			ff.reused = len(reusedFences(one, holds))
		}
	}
	for _, g := range h.Grants {
		if !g.Lost {
			continue
		}
		if i := r.switchIndexAfter(g.GrantedAt); i >= 0 {
			if holds[g.Exec] {
				out[i].lost++
			} else {
				out[i].lostUnseen++
			}
		}
	}
	for _, v := range rep.Violations {
		if at, ok := grantAt[v.Exec]; ok {
			if i := owner(at); i >= 0 {
				out[i].violations++
			}
		}
	}
	return out
}

// switchOf is the switch fault f recorded.
func (r *patroniRun) switchOf(f *patroniFault) (checker.Switch, bool) {
	for _, s := range r.switches {
		if s.Timeline == f.newTL && f.newTL != 0 {
			return s, true
		}
	}
	return checker.Switch{}, false
}

// switchIndexAfter is the index of the fault whose switch is the first one killed after t.
func (r *patroniRun) switchIndexAfter(t time.Time) int {
	for i, f := range r.faults {
		if s, ok := r.switchOf(f); ok && s.Killed.After(t) {
			return i
		}
	}
	return -1
}

// printPatroni prints the run's figures: a line per fault, then a table per fault kind.
func (r *patroniRun) printPatroni(h checker.History, rep checker.Report, figs []faultFigures, renamed map[checker.GrantKey]int64, took time.Duration) {
	var b strings.Builder
	pp := r.pprof
	fmt.Fprintf(&b, "\nPatroni run (%s replication, %s profile): %d processes × %d goroutines + 1 process of Work, %d faults, %s in all, threshold %s, heartbeat %s, lease %s, holds %s–%s; Patroni ttl %s, loop_wait %s, retry_timeout %s\n",
		r.mode, pp.name, pp.procs, pp.g, len(r.faults), took.Round(time.Second), pp.threshold, pp.interval, r.leaseTTL(), pp.minHold, pp.maxHold,
		pgcluster.PatroniTTL, pgcluster.PatroniLoopWait, pgcluster.PatroniRetryTimeout)
	for task, limit := range patroniTasks {
		n := 0
		for _, g := range h.Grants {
			if g.Task == task {
				n++
			}
		}
		fmt.Fprintf(&b, "  %-44s %d (limit %d, max %d at once)\n", "grants of "+task, n, limit, rep.MaxHolders[task])
	}
	for i, f := range r.faults {
		first := "no grant on a new timeline"
		if figs[i].firstGrant >= 0 {
			first = fmt.Sprintf("first grant %s after %s", figs[i].firstGrant.Round(time.Millisecond),
				map[bool]string{true: "etcd's return", false: "the fault"}[f.kind == fEtcdDown])
		}
		fmt.Fprintf(&b, "  %d. %s: %s; lost %d seen, %d unseen; %s\n", i+1, f.kind, first, figs[i].lost, figs[i].lostUnseen, strings.Join(f.did, "; "))
	}
	fmt.Fprintf(&b, "\n  %-26s %4s %10s %14s %22s %12s  %s\n", "fault", "runs", "violations", "fences reused", "→ first grant p50/p99", "grants lost", "what Patroni did")
	for _, kind := range []string{fSwitchover, fPostmaster, fEtcdCut, fEtcdDown, fPatroniKill} {
		r.printKind(&b, kind, figs)
	}
	fmt.Fprintf(&b, "  %-44s %d acknowledged, %d Submit errors, %d lost; %d attempts and %d completions lost in a failover (run again)\n",
		"submissions", len(r.subs.acked), r.subs.failed, len(r.subs.lost(r.t, context.Background())), rep.SubmissionAttemptsLost, rep.SubmissionCompletionsLost)
	fmt.Fprintf(&b, "  %-44s %d\n", "execution ids handed out again", len(renamed))
	fmt.Fprintf(&b, "  %-44s %d\n", "violations", len(rep.Violations))
	r.t.Log(b.String())
	fmt.Println(b.String())
}

// printKind prints the table's line of one fault kind.
func (r *patroniRun) printKind(b *strings.Builder, kind string, figs []faultFigures) {
	var grants []time.Duration
	runs, viol, reused, lost, unseen := 0, 0, 0, 0, 0
	did := map[string]int{}
	for i, f := range r.faults {
		if f.kind != kind {
			continue
		}
		runs++
		viol += figs[i].violations
		reused += figs[i].reused
		lost += figs[i].lost
		unseen += figs[i].lostUnseen
		if figs[i].firstGrant >= 0 {
			grants = append(grants, figs[i].firstGrant)
		}
		for _, d := range f.did {
			did[summarize(d)]++
		}
	}
	if runs == 0 {
		return
	}
	slices.Sort(grants)
	pct := "none"
	if len(grants) > 0 {
		pct = fmt.Sprintf("%s / %s", grants[len(grants)/2].Round(100*time.Millisecond), grants[min(len(grants)-1, len(grants)*99/100)].Round(100*time.Millisecond))
	}
	var dids []string
	for d, n := range did {
		if d != "" {
			dids = append(dids, fmt.Sprintf("%s ×%d", d, n))
		}
	}
	sort.Strings(dids)
	fmt.Fprintf(b, "  %-26s %4d %10d %14d %22s %12s  %s\n", kind, runs, viol, reused, pct, fmt.Sprintf("%d (+%d unseen)", lost, unseen), strings.Join(dids, ", "))
}

// summarize keeps what a fault's note says Patroni did, without its names and numbers.
func summarize(d string) string {
	switch {
	case strings.HasPrefix(d, "failover"):
		return "failover"
	case strings.Contains(d, "stays leader"):
		return "same leader, new timeline"
	case strings.HasSuffix(d, "server restarted"):
		return "old leader's server restarted"
	case strings.HasPrefix(d, "rewound"):
		return "rewind"
	case strings.HasPrefix(d, "reinit"):
		return "reinit"
	case strings.HasPrefix(d, "no new timeline"):
		return d
	}
	return ""
}

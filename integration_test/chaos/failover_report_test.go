package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"

	"github.com/taskling-go/taskling/integration_test/checker"
	"github.com/taskling-go/taskling/integration_test/ledger"
)

// collect reads the surviving primary's task rows, sweeps every slot, and joins the grants of
// the surviving primary with those of every killed primary (each started alone) and with the
// ledgers. It returns the history and the execution ids handed out again after a failover.
func (r *failoverRun) collect(ctx context.Context) (checker.History, map[checker.GrantKey]int64) {
	t := r.t
	h := checker.History{
		InitialLimit: map[string]int{},
		Kills:        r.kills,
		Outages:      r.outages,
		LeaseTTL:     r.leaseTTL(),
		Grace:        2 * r.fprof.interval,
		Switches:     r.switches,
	}
	for task, limit := range failoverTasks {
		h.InitialLimit[task] = limit
	}
	h.Before = taskStates(t, ctx, r.pool, app)
	sweep(t, ctx, r.pool, app, r.spec.dir, true, r.fprof.interval, r.fprof.threshold, failoverTasks, failoverTasks)
	h.After = taskStates(t, ctx, r.pool, app)
	r.logf("swept")
	final := readGrants(t, ctx, r.pool, app)
	var killed [][]checker.Grant
	for _, c := range r.pair.Killed() {
		node, err := r.pair.Inspect(ctx, c)
		require.NoError(t, err, "start a killed primary alone")
		pool, err := pgxpool.New(ctx, r.dbURLOn(node))
		require.NoError(t, err)
		killed = append(killed, readGrants(t, ctx, pool, app))
		pool.Close()
		if err := node.StopMode(ctx, pgcluster.StopImmediate); err != nil {
			t.Logf("stop the inspected node: %v", err)
		}
	}
	r.logf("killed primaries read")
	var renamed map[checker.GrantKey]int64
	h.Grants, renamed = checker.MergeTimelines(final, killed...)
	h.Holds = ledgerFrom(t, readRenamed(t, r.spec.dir, renamed)).holds
	return h, renamed
}

// readRenamed reads the ledgers of dir with the renamed grants' events given their new ids.
func readRenamed(t *testing.T, dir string, renamed map[checker.GrantKey]int64) []ledger.Event {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	sort.Strings(paths)
	var all []ledger.Event
	for _, p := range paths {
		evs, err := ledger.ReadFile(p)
		require.NoError(t, err)
		checker.RenameLedger(evs, renamed)
		all = append(all, evs...)
	}
	return all
}

// switchFigures are one failover's figures.
type switchFigures struct {
	down       time.Duration            // kill → the new primary accepts writes
	firstGrant time.Duration            // kill → the first grant on the new primary (-1: none)
	perTask    map[string]time.Duration // the same per task
	// Holders at the kill: those that worked on past the new primary's first write (their lease
	// renewed there) and completed, those whose context was cancelled, and those that finished
	// their work during the outage and then returned their slot (Complete succeeded on the new
	// primary) or could not (Complete failed; the slot reclaimed).
	survived, cancelled, finishedReturned, finishedReclaimed int
}

func figuresOf(h checker.History, s checker.Switch, writable time.Time) switchFigures {
	f := switchFigures{down: writable.Sub(s.Killed), firstGrant: -1, perTask: map[string]time.Duration{}}
	for _, g := range h.Grants {
		if !g.GrantedAt.After(s.Killed) {
			continue
		}
		d := g.GrantedAt.Sub(s.Killed)
		if f.firstGrant < 0 || d < f.firstGrant {
			f.firstGrant = d
		}
		if old, ok := f.perTask[g.Task]; !ok || d < old {
			f.perTask[g.Task] = d
		}
	}
	grants := map[int64]checker.Grant{}
	for _, g := range h.Grants {
		grants[g.Exec] = g
	}
	for _, hd := range h.Holds {
		g, ok := grants[hd.Exec]
		if !ok || hd.Host == "sweeper" || !g.GrantedAt.Before(s.Killed) || hd.Reason == "" || !hd.StopAt.After(s.Killed) {
			continue // not holding at the kill
		}
		switch {
		case hd.Reason != ledger.ReasonCompleted:
			f.cancelled++
		case hd.StopAt.After(writable) && hd.Result == ledger.ResultOK:
			f.survived++
		case hd.Result == ledger.ResultOK:
			f.finishedReturned++
		default:
			f.finishedReclaimed++
		}
	}
	return f
}

// reusedFences lists the grants made after a switch whose fence is not above every fence a
// holder saw before it.
func reusedFences(h checker.History, holds map[int64]bool) []string {
	var out []string
	for _, s := range h.Switches {
		maxBefore := map[string]checker.Grant{}
		for _, g := range h.Grants {
			if g.GrantedAt.Before(s.Killed) && (!g.Lost || holds[g.Exec]) && g.Fence > maxBefore[g.Task].Fence {
				maxBefore[g.Task] = g
			}
		}
		for _, g := range h.Grants {
			m, ok := maxBefore[g.Task]
			if ok && !g.Lost && g.GrantedAt.After(s.Killed) && g.Fence <= m.Fence {
				out = append(out, fmt.Sprintf("%s fence %d to exec %d on %s at %s, after fence %d (exec %d on %s, lost: %v) before the kill at %s",
					g.Task, g.Fence, g.Exec, g.Host, g.GrantedAt.Format("15:04:05.000"), m.Fence, m.Exec, m.Host, m.Lost, s.Killed.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// printFailover prints the run's figures.
func (r *failoverRun) printFailover(h checker.History, rep checker.Report, renamed map[checker.GrantKey]int64, took time.Duration) {
	var b strings.Builder
	fp := r.fprof
	fmt.Fprintf(&b, "\nfailover run (%s replication, %s profile): %d processes × %d goroutines, %d failovers, %s in all, threshold %s, heartbeat %s, lease %s, holds %s–%s\n",
		r.mode, fp.name, fp.procs, fp.g, len(r.switches), took.Round(time.Second), fp.threshold, fp.interval, r.leaseTTL(), fp.minHold, fp.maxHold)
	for _, task := range []string{"pool", "singleton"} {
		n := 0
		for _, g := range h.Grants {
			if g.Task == task {
				n++
			}
		}
		fmt.Fprintf(&b, "  %-44s %d (limit %d, max %d at once)\n", "grants of "+task, n, failoverTasks[task], rep.MaxHolders[task])
	}
	for i, s := range r.switches {
		f := figuresOf(h, s, s.Writable)
		kind := "quick"
		if r.rounds[i].slow {
			kind = "slow"
		}
		fmt.Fprintf(&b, "  failover %d (%s): down %s, kill → first grant %s (pool %s, singleton %s)\n", i+1, kind, f.down.Round(time.Millisecond),
			f.firstGrant.Round(time.Millisecond), f.perTask["pool"].Round(time.Millisecond), f.perTask["singleton"].Round(time.Millisecond))
		fmt.Fprintf(&b, "    holders at the kill: %d survived it, %d cancelled themselves, %d finished during the outage (%d returned the slot after it, %d had it reclaimed)\n",
			f.survived, f.cancelled, f.finishedReturned+f.finishedReclaimed, f.finishedReturned, f.finishedReclaimed)
		if l := r.rounds[i].lost; l != nil {
			fmt.Fprintf(&b, "    lost on purpose: %s exec %d fence %d on %s, granted %s before the kill\n", l.Task, l.Exec, l.Fence, l.Host,
				s.Killed.Sub(l.GrantedAt).Round(time.Millisecond))
		}
	}
	holds := map[int64]bool{}
	for _, hd := range h.Holds {
		holds[hd.Exec] = true
	}
	reused := reusedFences(h, holds)
	dup := 0
	for _, v := range rep.Violations {
		if v.Check == "a" {
			dup++
		}
	}
	fmt.Fprintf(&b, "  %-44s %d\n", "grants lost in a failover, seen by a holder", sum(rep.Lost))
	fmt.Fprintf(&b, "  %-44s %d\n", "grants lost that no holder saw", sum(rep.LostUnseen))
	lostEnds := 0
	for _, g := range h.Grants {
		if !g.LostCompletion.IsZero() && !g.Lost {
			lostEnds++
		}
	}
	fmt.Fprintf(&b, "  %-44s %d\n", "completions lost (the slot reclaimed later)", lostEnds)
	fmt.Fprintf(&b, "  %-44s %d\n", "slots duplicated (grants over the limit)", dup)
	fmt.Fprintf(&b, "  %-44s %d\n", "fences reused after a failover", len(reused))
	for i, s := range reused {
		if i == 5 {
			fmt.Fprintf(&b, "    … and %d more\n", len(reused)-5)
			break
		}
		fmt.Fprintf(&b, "    %s\n", s)
	}
	fmt.Fprintf(&b, "  %-44s %d\n", "execution ids handed out again", len(renamed))
	fmt.Fprintf(&b, "  %-44s %d\n", "violations", len(rep.Violations))
	r.t.Log(b.String())
	fmt.Println(b.String())
}

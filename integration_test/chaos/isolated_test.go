package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskling-go/taskling/integration_test/checker"
)

// TestChaos's long profile measures the reclaim latency after kill -9 on kills made for it, at
// each isolation level, until each level has isolatedPerLevel measured: an isolated kill comes
// once no other process or server fault has been in flight for the threshold + 1 s and the level
// in force has settled, catches a holder of the singleton (every worker stopped with SIGSTOP while
// their ledgers are read, one whose hold is open there killed, the rest resumed), and keeps every other fault off for the threshold + 1 s after the holder
// stopped and until its slot is reclaimed. The sample is scheduled, not hoped for: the run fails
// on it only when the time bound passes first (a harness failure, named so), and otherwise
// judges what the system did with it.

// isolatedCatchFor bounds an isolated kill's catch of a singleton holder: a try takes some 20 ms
// (every worker stopped, the ledgers read, 20 ms of sleep), and a catch needs a moment at which
// the singleton, which many waiters queue for, is held by a grant its holder has recorded.
const isolatedCatchFor = 5 * time.Second

// isolatedRecoveryFor bounds the wait of an isolated kill for the workers to be back at work after
// the last fault (workersBack): a worker not back by then is stuck, and the kill is given up. The
// fleet's connections after a restart take 20-30 s to open on a loaded 2-core machine (see
// chaosworker's ConnectTimeout, 45 s).
const isolatedRecoveryFor = 90 * time.Second

// isolatedTally is what the isolated kills did, for the table and a short run's message.
type isolatedTally struct {
	made     map[string]int // by level
	uncaught int            // isolated kills given up: no try caught a singleton holder
	notBack  int            // isolated kills given up: not every worker back at work (workersBack)
	// tries of the catches (stopHolder), in all and the most of one
	tries, mostTries int
}

// isolationQuiet is how long no other fault may be in flight before and after an isolated kill.
func (r *run) isolationQuiet() time.Duration {
	return r.prof.threshold + time.Second
}

// isolatedKill makes one isolated kill at the level in force (see above) and reports whether it
// killed. The last fault is over once every live worker has been granted a slot since it ended
// (workersBack): on a loaded machine the workers take seconds to come back after a server
// restart, and a reclaim measured before would measure their return.
func (r *run) isolatedKill() bool {
	r.mu.Lock()
	wait := r.lastEnd.Add(r.isolationQuiet()).Sub(r.nem.Now())
	r.mu.Unlock()
	time.Sleep(wait) // negative: no wait
	level, _ := r.lv.current()
	missing := r.workersBack(isolatedRecoveryFor)
	back := len(missing) == 0
	killed := back && r.killHolder(true, isolatedCatchFor)
	r.mu.Lock()
	if r.isolated.made == nil {
		r.isolated.made = map[string]int{}
	}
	switch {
	case killed:
		r.isolated.made[level]++
	case !back:
		r.isolated.notBack++
	default:
		r.isolated.uncaught++
	}
	r.mu.Unlock()
	switch {
	case !back:
		r.logf("isolated kill at %s: not every worker was granted a slot within %s of the last fault's end (not: %s)", level, isolatedRecoveryFor, strings.Join(missing, ", "))
	case !killed:
		r.logf("isolated kill at %s: no singleton holder caught within %s", level, isolatedCatchFor)
	}
	return killed
}

// workersBack waits up to within for every live worker to have been granted a slot since the last
// fault ended, and returns those that were not (each with its last grant), none if all were.
func (r *run) workersBack(within time.Duration) []string {
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		r.mu.Lock()
		r.readHolds()
		var missing []string
		for _, p := range r.procs {
			if p.alive() && !r.granted[p.host].After(r.lastEnd) {
				missing = append(missing, fmt.Sprintf("%s (last grant %s, the fault ended %s)", p.host,
					r.granted[p.host].Format("15:04:05.000"), r.lastEnd.Format("15:04:05.000")))
			}
		}
		r.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
	}
}

// roundIsolatedKills opens a round: up to isolatedPerRound isolated kills at the level in force,
// while it has fewer than isolatedPerLevel measured, before until.
func (r *run) roundIsolatedKills(until time.Time) {
	for range r.prof.isolatedPerRound {
		level, _ := r.lv.current()
		if !time.Now().Before(until) || r.measuredByLevel()[level] >= r.prof.isolatedPerLevel {
			return
		}
		r.isolatedKill()
	}
}

// topUpIsolatedKills makes the isolated kills still missing after the rounds, at the level with
// the fewest measured, until each level has isolatedPerLevel or bound passes.
func (r *run) topUpIsolatedKills(bound time.Time) {
	if r.prof.isolatedPerLevel == 0 {
		return
	}
	for {
		n := r.measuredByLevel()
		need := ""
		for _, lvl := range levelNames {
			if n[lvl] < r.prof.isolatedPerLevel && (need == "" || n[lvl] < n[need]) {
				need = lvl
			}
		}
		if need == "" || !time.Now().Before(bound) {
			r.logf("isolated kills measured: %s %d, %s %d (time bound passed: %v)",
				levelNames[0], n[levelNames[0]], levelNames[1], n[levelNames[1]], need != "")
			return
		}
		r.switchLevel(need)
		r.isolatedKill()
	}
}

// measuredByLevel is the number of isolated kills with a measured reclaim latency at each level,
// from their grants as they stand (read again for up to a minute while the server recovers from a
// restart).
func (r *run) measuredByLevel() map[string]int {
	r.mu.Lock()
	execs := []int64{}
	for _, k := range r.caught {
		execs = append(execs, k.exec)
	}
	r.mu.Unlock()
	var grants []checker.Grant
	for giveUp := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		g, err := queryGrants(ctx, r.pool, app, execs)
		cancel()
		if err == nil {
			grants = g
			break
		}
		if time.Now().After(giveUp) {
			r.t.Fatalf("read the grants to count the isolated kills: %v", err)
		}
	}
	n := map[string]int{}
	for _, lvl := range levelNames {
		n[lvl] = len(r.measuredKills(grants, lvl))
	}
	return n
}

// measuredKill is a kill whose reclaim latency was measured: the killed host, when it stopped,
// and the latency.
type measuredKill struct {
	host    string
	stopped time.Time
	latency time.Duration
}

// measuredKills are the kills that caught a singleton holder at level (isolated ones only, in a
// profile that makes them), by latency: from the moment the holder stopped to the reclaim of its
// slot (both on the database clock), for holders alive then (their last heartbeat within the
// threshold). A slot that no waiter took is reclaimed by the sweep, and its latency counts.
func (r *run) measuredKills(grants []checker.Grant, level string) []measuredKill {
	byExec := map[int64]checker.Grant{}
	for _, g := range grants {
		byExec[g.Exec] = g
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ms []measuredKill
	for host, k := range r.caught {
		g, ok := byExec[k.exec]
		if !ok || k.level != level || (r.prof.isolatedPerLevel > 0 && !k.isolated) {
			continue
		}
		if g.ReclaimedAt.After(k.stopped) && k.stopped.Sub(g.LastKeepAlive) < r.prof.threshold {
			ms = append(ms, measuredKill{host: host, stopped: k.stopped, latency: g.ReclaimedAt.Sub(k.stopped)})
		}
	}
	slices.SortFunc(ms, func(a, b measuredKill) int { return cmp.Compare(a.latency, b.latency) })
	return ms
}

// latenciesOf is the latencies of ms, in order.
func latenciesOf(ms []measuredKill) []time.Duration {
	lat := make([]time.Duration, len(ms))
	for i, m := range ms {
		lat[i] = m.latency
	}
	return lat
}

// judgeIsolatedKills fails the run on what the system did with the isolated kills of level —
// their p99 above goal — and, apart, on a sample the schedule did not complete within its bound.
func (r *run) judgeIsolatedKills(level string, ms []measuredKill, goal time.Duration) {
	if r.prof.isolatedPerLevel == 0 {
		return
	}
	lat := latenciesOf(ms)
	if len(lat) > 0 {
		if p99 := lat[min(len(lat)-1, len(lat)*99/100)]; p99 > goal {
			var slow []string
			for _, m := range ms {
				if m.latency > goal {
					slow = append(slow, fmt.Sprintf("%s stopped %s: %s", m.host, m.stopped.UTC().Format("15:04:05.000"), m.latency.Round(time.Millisecond)))
				}
			}
			r.t.Errorf("%s: reclaim latency after isolated kills: want p99 ≤ threshold + 250 ms (%s); got %s (n=%d, latencies %v; above the goal: %s)",
				level, goal, p99.Round(time.Millisecond), len(lat), lat, strings.Join(slow, ", "))
		}
	}
	if len(lat) < r.prof.isolatedPerLevel {
		r.mu.Lock()
		made, uncaught, notBack := r.isolated.made[level], r.isolated.uncaught, r.isolated.notBack
		r.mu.Unlock()
		r.t.Errorf("chaos harness (not a verdict on the system): %s: %d isolated kills measured of the %d wanted, when the time bound "+
			"(%s of rounds + %s) passed: %d made at this level; given up in all: %d with no singleton holder caught within %s, "+
			"%d with a worker not back at work within %s of the last fault; the kills' notes in the log say whether their slots were reclaimed",
			level, len(lat), r.prof.isolatedPerLevel, r.prof.duration, r.prof.isolatedBudget, made, uncaught, isolatedCatchFor,
			notBack, isolatedRecoveryFor)
	}
}

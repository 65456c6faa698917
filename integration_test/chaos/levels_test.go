package chaos

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/taskling-go/taskling/integration_test/checker"
	"github.com/taskling-go/taskling/integration_test/ledger"
)

// TestChaos runs both isolation levels in one run (issue 25): every worker process holds a
// client per level, and each start uses the level named by a file the workers read every 20 ms
// (chaosworker -isolation-file). The nemesis switches the level at the start of every round of
// faults, and in the top-up between kills as needed; each grant's ledger entry names its level.

// levelSettle is how long after a switch a kill waits so that its reclaim is measured at the new
// level: a start still under way at the old level ends within the worker's start timeout (3 s),
// and the workers read the file every 20 ms.
const levelSettle = 3*time.Second + 100*time.Millisecond

// levelNames are the isolation levels, READ COMMITTED first.
var levelNames = []string{ledger.IsolationReadCommitted, ledger.IsolationSerializable}

// levels is the isolation level in force: the file the workers read, when each level was in
// force, and the level in force at each kill.
type levels struct {
	path string
	nem  *ledger.Writer

	mu     sync.Mutex
	spans  []levelSpan
	rounds [2]time.Time      // start and end of the nemesis's rounds of faults
	killed map[string]string // host → the level in force (settled) when it was SIGKILLed
}

// levelSpan is a level in force from from (ledger time).
type levelSpan struct {
	level string
	from  time.Time
}

// newLevels writes the level file in dir with a level drawn at random, before the workers start.
func newLevels(dir string, nem *ledger.Writer) (*levels, error) {
	l := &levels{path: filepath.Join(dir, "isolation"), nem: nem, killed: map[string]string{}}
	return l, l.set(levelNames[rand.IntN(len(levelNames))])
}

// set makes level the one in force, by rename: a worker reads the old level or the new one whole.
func (l *levels) set(level string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.spans); n > 0 && l.spans[n-1].level == level {
		return nil
	}
	tmp := l.path + ".new"
	if err := os.WriteFile(tmp, []byte(level+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return err
	}
	at := l.nem.Now()
	l.spans = append(l.spans, levelSpan{level: level, from: at})
	return l.nem.Write(ledger.Event{Kind: ledger.KindIsolation, At: at, Isolation: level})
}

// current is the level in force and since when ("" for a run without levels).
func (l *levels) current() (string, time.Time) {
	if l == nil {
		return "", time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.spans[len(l.spans)-1]
	return s.level, s.from
}

// markRounds records the start (i = 0) or the end (i = 1) of the nemesis's rounds of faults:
// grants are compared over them (not the workers' start-up before, nor the top-up after).
func (l *levels) markRounds(i int) {
	l.mu.Lock()
	l.rounds[i] = l.nem.Now()
	l.mu.Unlock()
}

// killedAt records the level in force at the SIGKILL of host, and returns it ("" for a run
// without levels).
func (l *levels) killedAt(host string) string {
	if l == nil {
		return ""
	}
	level, _ := l.current()
	l.mu.Lock()
	l.killed[host] = level
	l.mu.Unlock()
	return level
}

// at is the level in force at t, and since when.
func (l *levels) at(t time.Time) (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.spans[0]
	for _, n := range l.spans[1:] {
		if n.from.After(t) {
			break
		}
		s = n
	}
	return s.level, s.from
}

// other is the level not in force.
func (l *levels) other() string {
	cur, _ := l.current()
	if cur == levelNames[0] {
		return levelNames[1]
	}
	return levelNames[0]
}

// inForce is how long level was in force within [from, to).
func (l *levels) inForce(level string, from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d time.Duration
	for i, s := range l.spans {
		end := to
		if i+1 < len(l.spans) {
			end = l.spans[i+1].from
		}
		if s.level == level {
			d += max(0, minTime(end, to).Sub(maxTime(s.from, from)))
		}
	}
	return d
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// switchLevel makes level the one in force.
func (r *run) switchLevel(level string) {
	if cur, _ := r.lv.current(); cur == level {
		return
	}
	if err := r.lv.set(level); err != nil {
		r.t.Fatalf("switch the isolation level: %v", err)
	}
	r.logf("isolation level in force: %s", level)
}

// waitLevelSettled waits until the level in force has been so for levelSettle (the first level
// is in force before the workers start).
func (r *run) waitLevelSettled() {
	if _, since := r.lv.current(); !since.IsZero() {
		time.Sleep(since.Add(levelSettle).Sub(r.nem.Now()))
	}
}

// levelFigures is what the table says of one level.
type levelFigures struct {
	inForce         time.Duration  // within the rounds
	byTask          map[string]int // grants within the rounds
	grants, all     int            // within the rounds, and in the whole run
	kills           int            // kill -9 made while the level was in force
	isolated        int            // of them, isolated kills
	measured        []measuredKill // by latency
	grantsPerSecond float64
}

// levelsOf reads each grant's level from the ledgers (exec → level).
func (r *run) levelsOf() map[int64]string {
	evs, err := ledger.ReadDir(r.spec.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	m := map[int64]string{}
	for _, e := range evs {
		if e.Kind == ledger.KindGrant && e.Isolation != "" {
			m[e.Exec] = e.Isolation
		}
	}
	return m
}

// levelFiguresOf computes each level's figures, and counts the grants of no known level and the
// stray ones: made at the level not in force, more than levelSettle after the switch (the workers
// did not follow the level file).
func (r *run) levelFiguresOf(h checker.History) (figs map[string]*levelFigures, unknown, stray int) {
	byExec := r.levelsOf()
	r.lv.mu.Lock()
	rounds := r.lv.rounds
	killed := maps.Clone(r.lv.killed)
	r.lv.mu.Unlock()
	figs = map[string]*levelFigures{}
	for _, lvl := range levelNames {
		f := &levelFigures{byTask: map[string]int{}, inForce: r.lv.inForce(lvl, rounds[0], rounds[1])}
		f.measured = r.measuredKills(h.Grants, lvl)
		r.mu.Lock()
		f.isolated = r.isolated.made[lvl]
		r.mu.Unlock()
		for _, l := range killed {
			if l == lvl {
				f.kills++
			}
		}
		figs[lvl] = f
	}
	for _, g := range h.Grants {
		if g.Host == "sweeper" {
			continue
		}
		f := figs[byExec[g.Exec]]
		if f == nil {
			unknown++
			continue
		}
		if lvl, since := r.lv.at(g.GrantedAt); lvl != byExec[g.Exec] && g.GrantedAt.Sub(since) > levelSettle {
			stray++
		}
		f.all++
		if !g.GrantedAt.Before(rounds[0]) && g.GrantedAt.Before(rounds[1]) {
			f.grants++
			f.byTask[g.Task]++
		}
	}
	for _, f := range figs {
		if f.inForce > 0 {
			f.grantsPerSecond = float64(f.grants) / f.inForce.Seconds()
		}
	}
	return figs, unknown, stray
}

// printLevels writes the per-level part of the table and, in the long profile, fails the run
// if a level's isolated kills have a p99 reclaim latency above the threshold + 250 ms, or too few
// of them were measured (judgeIsolatedKills), or SERIALIZABLE's grants per second are below 0.8×
// READ COMMITTED's (over the rounds of faults).
func (r *run) printLevels(b *strings.Builder, h checker.History) {
	figs, unknown, stray := r.levelFiguresOf(h)
	goal := r.prof.threshold + 250*time.Millisecond
	row := func(name string, cell func(f *levelFigures) string) {
		fmt.Fprintf(b, "  %-34s", name)
		for _, lvl := range levelNames {
			fmt.Fprintf(b, " %-16s", cell(figs[lvl]))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "  by isolation level, switched at every round of faults (time and grants: within the rounds)\n")
	fmt.Fprintf(b, "  %-34s %-16s %-16s\n", "", "READ COMMITTED", "SERIALIZABLE")
	row("time in force", func(f *levelFigures) string { return f.inForce.Round(time.Second).String() })
	row("grants", func(f *levelFigures) string { return fmt.Sprint(f.grants) })
	for _, tk := range tasks {
		row("  "+tk.name, func(f *levelFigures) string { return fmt.Sprint(f.byTask[tk.name]) })
	}
	row("grants per second", func(f *levelFigures) string { return fmt.Sprintf("%.1f", f.grantsPerSecond) })
	row("grants in the whole run", func(f *levelFigures) string { return fmt.Sprint(f.all) })
	row(fKill+" at this level", func(f *levelFigures) string { return fmt.Sprint(f.kills) })
	if r.prof.isolatedPerLevel > 0 {
		row("  isolated", func(f *levelFigures) string { return fmt.Sprint(f.isolated) })
		r.mu.Lock()
		t := r.isolated
		r.mu.Unlock()
		fmt.Fprintf(b, "  %-34s %d tries in all, %d at most; isolated kills given up: %d no holder caught, %d workers not back\n",
			"catching a singleton holder", t.tries, t.mostTries, t.uncaught, t.notBack)
	}
	what := "kill -9 → reclaim, "
	if r.prof.isolatedPerLevel > 0 {
		what = "isolated kill → reclaim, "
	}
	for _, lvl := range levelNames {
		lat := latenciesOf(figs[lvl].measured)
		if len(lat) == 0 {
			fmt.Fprintf(b, "  %-34s none measured\n", what+lvl)
		} else {
			p99 := lat[min(len(lat)-1, len(lat)*99/100)]
			fmt.Fprintf(b, "  %-34s p50 %s, p99 %s, max %s (n=%d; goal ≤ %s: %v)\n", what+lvl,
				lat[len(lat)/2].Round(time.Millisecond), p99.Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat), goal, p99 <= goal)
		}
		r.judgeIsolatedKills(lvl, figs[lvl].measured, goal)
	}
	rc, ser := figs[levelNames[0]].grantsPerSecond, figs[levelNames[1]].grantsPerSecond
	ratio := 0.0
	if rc > 0 {
		ratio = ser / rc
	}
	fmt.Fprintf(b, "  %-34s %.2f (goal ≥ 0.80: %v)\n", "SERIALIZABLE / READ COMMITTED", ratio, ratio >= 0.8)
	fmt.Fprintf(b, "  %-34s %d (%d of no known level: ghosts)\n", "grants at the level not in force", stray, unknown)
	if r.prof.isolatedPerLevel > 0 && ratio < 0.8 {
		r.t.Errorf("SERIALIZABLE grants per second %.1f < 0.8 × READ COMMITTED's %.1f (ratio %.2f)", ser, rc, ratio)
	}
}

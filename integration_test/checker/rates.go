package checker

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Rate is a rate a run configured (TaskSettings.Rate, KeyRate or a named key's): at most Count
// units per Per, Burst at once (0 means 1). The zero Rate is none. The checker has its own type,
// as it has for key limits: it judges the library, so it shares none of its code.
type Rate struct {
	Count int
	Per   time.Duration
	Burst int
}

// IsZero reports no rate.
func (r Rate) IsZero() bool { return r.Count <= 0 || r.Per <= 0 }

// Bound is the most units a window of Per may hold: Count + Burst − 1.
func (r Rate) Bound() int { return r.Count + max(r.Burst, 1) - 1 }

// interval is the time one unit takes, rounded up.
func (r Rate) interval() time.Duration {
	return (r.Per + time.Duration(r.Count) - 1) / time.Duration(r.Count)
}

func (r Rate) String() string {
	return fmt.Sprintf("%d/%s burst %d", r.Count, r.Per, max(r.Burst, 1))
}

// Rates are a task's rates (check r): Task the task's, Key every key's (the empty key's too),
// Named the keys with a rate of their own, which wins over Key. A run that changes them is not
// judged.
type Rates struct {
	Task  Rate
	Key   Rate
	Named map[string]Rate
}

// For is key's rate (zero: none).
func (rs Rates) For(key string) Rate {
	if r, ok := rs.Named[key]; ok && !r.IsZero() {
		return r
	}
	return rs.Key
}

// RateFigure is the busiest window of one rate: the most units its grants took in a window of
// Per, its bound, and the grants judged.
type RateFigure struct {
	Units, Bound, Grants int
}

// rateGrants are the grants a rate judges, in order of grant time.
func rateGrants(gs []*Grant) []*Grant {
	out := slices.Clone(gs)
	slices.SortStableFunc(out, func(a, b *Grant) int { return a.GrantedAt.Compare(b.GrantedAt) })
	return out
}

// checkRates is check (r). A rate's promise: in every half-open window [a, a+Per) of the
// database's grant times (task_execution.started_at, which a handed-off slot's execution takes
// from its grant), the costs of the grants under the rate add up to at most Count + Burst − 1.
// Every grant counts, those later reclaimed and those a failover lost included (their times are
// the old primary's); a slot granted to a ticket and never taken has no execution and is not
// seen, which only makes the sums smaller. It suffices to judge the windows that begin at a grant:
// any window's grants are those of the window beginning at its first grant, or fewer.
func (c *checkRun) checkRates() {
	byTask := map[string][]*Grant{}
	for i := range c.h.Grants {
		if g := &c.h.Grants[i]; !g.GrantedAt.IsZero() {
			byTask[g.Task] = append(byTask[g.Task], g)
		}
	}
	for task, rs := range c.h.Rates {
		gs := rateGrants(byTask[task])
		if !rs.Task.IsZero() {
			c.r.TaskRateUnits[task] = c.checkWindows(task, "the task's rate", rs.Task, gs)
		}
		byKey := map[string][]*Grant{}
		for _, g := range gs {
			if !rs.For(g.Key).IsZero() {
				byKey[g.Key] = append(byKey[g.Key], g)
			}
		}
		for key, kgs := range byKey {
			if c.r.KeyRateUnits[task] == nil {
				c.r.KeyRateUnits[task] = map[string]RateFigure{}
			}
			c.r.KeyRateUnits[task][key] = c.checkWindows(task, fmt.Sprintf("key %q's rate", key), rs.For(key), kgs)
		}
	}
}

// checkWindows judges the windows of rate r over gs (in grant order) and returns the busiest. A
// window over the bound is reported once, with its grants, and the next window judged begins
// after it.
func (c *checkRun) checkWindows(task, which string, r Rate, gs []*Grant) RateFigure {
	fig := RateFigure{Bound: r.Bound(), Grants: len(gs)}
	units, j := 0, 0 // units of gs[i:j], the grants of [gs[i].GrantedAt, +Per)
	for i := 0; i < len(gs); i++ {
		end := gs[i].GrantedAt.Add(r.Per)
		for j < len(gs) && gs[j].GrantedAt.Before(end) {
			units += gs[j].cost()
			j++
		}
		if i == 0 || !gs[i].GrantedAt.Equal(gs[i-1].GrantedAt) { // a window begins at the first of equal times
			fig.Units = max(fig.Units, units)
			if units > fig.Bound {
				c.reportWindow(task, which, r, gs[i:j], units)
				i = j - 1 // the loop's i++ moves past the window
				units = 0
				continue
			}
		}
		units -= gs[i].cost()
	}
	return fig
}

// reportWindow reports a window over its rate's bound: the grant that went over and every grant
// of the window (the first 20).
func (c *checkRun) reportWindow(task, which string, r Rate, in []*Grant, units int) {
	var over int64
	sum := 0
	var list []string
	for n, g := range in {
		sum += g.cost()
		if over == 0 && sum > r.Bound() {
			over = g.Exec
		}
		if n < 20 {
			list = append(list, fmt.Sprintf("exec %d cost %d key %q on %s at %s", g.Exec, g.cost(), g.Key, g.Host, ts(g.GrantedAt)))
		}
	}
	if len(in) > 20 {
		list = append(list, fmt.Sprintf("and %d more", len(in)-20))
	}
	from := in[0].GrantedAt
	c.r.add("r", task, over, "%s %s: the grants of [%s, %s) cost %d, over Count + Burst − 1 = %d: %s",
		which, r, ts(from), ts(from.Add(r.Per)), units, r.Bound(), strings.Join(list, "; "))
}

// RatesHadRoom reports whether each rate over a start of key in task (the task's, and the key's)
// had room for a start of cost 1 at every instant of [from, to); a rate that is not there had
// room. The state of each, a GCRA (its theoretical arrival time, tat), is replayed from the
// database's grants: a grant of cost c at t moves tat to max(tat, t) + c·Per/Count, and a unit
// fits at x when tat ≤ x + (Burst−1)·Per/Count. The replay knows only the grants that have
// executions (a slot handed to a ticket and never taken is not seen), so it may find room that
// the database did not have; it never misses room the database had.
func (h History) RatesHadRoom(task, key string, from, to time.Time) (taskRoom, keyRoom bool) {
	rs := h.Rates[task]
	var gs, kgs []*Grant
	for i := range h.Grants {
		if g := &h.Grants[i]; g.Task == task && !g.GrantedAt.IsZero() && g.GrantedAt.Before(to) {
			gs = append(gs, g)
		}
	}
	gs = rateGrants(gs)
	for _, g := range gs {
		if g.Key == key {
			kgs = append(kgs, g)
		}
	}
	taskRoom = rs.Task.IsZero() || hadRoom(rs.Task, gs, from)
	kr := rs.For(key)
	return taskRoom, kr.IsZero() || hadRoom(kr, kgs, from)
}

// hadRoom replays r over gs (in grant order, all before the end of the span) and reports whether
// a unit fit at from and just after each grant after it: tat rises only at grants, and room only
// grows between them.
func hadRoom(r Rate, gs []*Grant, from time.Time) bool {
	t := r.interval()
	slack := time.Duration(max(r.Burst, 1)-1) * t
	var tat time.Time
	checked := false
	for _, g := range gs {
		if !checked && g.GrantedAt.After(from) {
			if tat.After(from.Add(slack)) {
				return false
			}
			checked = true
		}
		tat = later(tat, g.GrantedAt).Add(time.Duration(g.cost()) * t)
		if checked && tat.After(g.GrantedAt.Add(slack)) {
			return false
		}
	}
	return checked || !tat.After(from.Add(slack))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ReclaimFigures are the reclaim latencies after kill -9 of the slots no rate held back
// (sorted), and the reclaims left out because the task's rate, or else the slot's key's, lacked
// room.
type ReclaimFigures struct {
	Latencies                     []time.Duration
	HeldByTaskRate, HeldByKeyRate int
}

// ReclaimLatencies measures, from a kill -9 (killSignal: host → when the signal was sent) to the
// database's reclaim, each slot of task the killed process held (granted before the signal,
// heartbeating within the threshold of it, reclaimed after it) that no rate held back. The
// database may reclaim a slot from D = its last heartbeat + its threshold on; no rate changes that.
// What a rate may delay is the transaction that reclaims it: with no room, every waiter sleeps
// until its RetryAfter, which may be past D. So a reclaim is measured only when the rates over
// the slot's start (the task's, and its key's: its key's waiters may be the ones to come back)
// each had room for a start at every instant from D to the reclaim (RatesHadRoom).
func ReclaimLatencies(h History, task string, killSignal map[string]time.Time) ReclaimFigures {
	var f ReclaimFigures
	for _, g := range h.Grants {
		sent, ok := killSignal[g.Host]
		if !ok || g.Task != task || !g.ReclaimedAt.After(sent) || !g.GrantedAt.Before(sent) || sent.Sub(g.LastKeepAlive) >= g.Threshold {
			continue
		}
		taskRoom, keyRoom := h.RatesHadRoom(task, g.Key, g.LastKeepAlive.Add(g.Threshold), g.ReclaimedAt)
		switch {
		case !taskRoom:
			f.HeldByTaskRate++
		case !keyRoom:
			f.HeldByKeyRate++
		default:
			f.Latencies = append(f.Latencies, g.ReclaimedAt.Sub(sent))
		}
	}
	slices.Sort(f.Latencies)
	return f
}

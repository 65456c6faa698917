package checker

import (
	"sort"
	"time"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// Check (m): critical sections.
//
// A task's critical section is a hidden task of limit 1 (the task's name with
// taskling.SectionSuffix) whose executions are started by CriticalSection on behalf of an
// execution of the task, their owner (the section execution's reference value names it). So
// the checks of slots apply to it as they are: with the section's holds among History.Holds
// (an acquisition recorded in a ledger is a hold of the section execution its owner got, from
// its grant to the last instant the holder saw the section's context not cancelled, or its
// process's kill), (a) says that no two held it at once, (c) that a dead holder's section was
// taken only once the holder was dead by the database's rule, (e) that a holder that lost it
// stopped before, and (g), with the section task's queue observed, that waiters were served in
// the order they queued, across processes. Check (m) adds what is particular to sections:
//
//	(m1) ownership: every section grant has an owner, a granted execution of the owners' task on
//	     the same host, granted before it; the section was released no later than its owner
//	     completed; each acquisition in the ledgers is one grant of its owner, and the database
//	     granted the section to no owner whose worker did not acquire it (a grant its waiter
//	     never learned of would hold the section for as long as its process lives), unless that
//	     worker's process was killed while it waited;
//	(m2) timeouts: a wait that timed out returned no earlier than its timeout after it began,
//	     and no later than HandoffBound after that; no wait failed otherwise;
//	(m3) handoff: a waiter that waited when the holder released is granted the section within
//	     HandoffBound of the release — or of the moment a waiter queued ahead of it gave up, if
//	     that came later: a waiter that gives up does not hold the line. A handoff with a waiter
//	     of a process killed less than DeadTicketLife before queued ahead is not judged (its
//	     ticket may be offered the section until its session is judged dead or the offer lapses);
//	(m4) takeover: when a process was killed while one of its holders held the section, the
//	     next grant of the section came within TakeoverBound of the SIGKILL.

// SectionRun is what a critical-section run recorded (check m).
type SectionRun struct {
	Task      string // the section's task
	OwnerTask string
	// Owners maps each execution of the section's task to its owner.
	Owners map[int64]int64
	// Waits are the calls of CriticalSection the ledgers recorded.
	Waits []SectionWait
	// KillSent is when each killed host was sent its SIGKILL.
	KillSent                    map[string]time.Time
	TakeoverBound, HandoffBound time.Duration
	// DeadTicketLife is how long a killed process's ticket may stay in the queue: its death
	// threshold plus an offer window.
	DeadTicketLife time.Duration
}

// SectionWait is one call of CriticalSection, as its worker recorded it.
type SectionWait struct {
	Owner       int64
	Host        string
	RequestedAt time.Time
	Timeout     time.Duration // 0: none
	// Outcome is SectionAcquired, ledger.SectionTimeout, ledger.SectionStopped or
	// ledger.ResultError; "" if none was recorded (the process was killed first).
	Outcome string
	At      time.Time // when CriticalSection returned
	Error   string
	// NotLimitReached: a timeout whose error did not wrap ErrLimitReached (counted, see
	// SectionFigures).
	NotLimitReached bool
}

// SectionAcquired is the outcome of a wait that got the section.
const SectionAcquired = "acquired"

// SectionFigures are the figures of check (m).
type SectionFigures struct {
	Grants, Acquired, TimedOut int
	// TimedOutNotLimit counts the timeouts whose error did not wrap ErrLimitReached, which
	// CriticalSection's documentation promises (the timeout passed before the wait queued).
	TimedOutNotLimit int
	// Gaps are the handoff gaps judged by (m3); BehindTimeout counts those in which a waiter
	// ahead gave up, and Excused those not judged for a killed process's waiter ahead.
	Gaps                   []time.Duration
	BehindTimeout, Excused int
	// Takeovers are the (m4) latencies: SIGKILL of a holder → the next grant.
	Takeovers []time.Duration
}

// checkSection is check (m).
func (c *checkRun) checkSection() {
	sr := c.h.Section
	if sr == nil {
		return
	}
	r := &c.r
	f := &r.Section
	task := sr.Task
	var grants []*Grant
	grantsOf := map[int64][]*Grant{} // owner → its section grants
	for _, g := range c.grants {
		if g.Task != task {
			continue
		}
		grants = append(grants, g)
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].Fence < grants[j].Fence })
	f.Grants = len(grants)
	c.sectionOwners(sr, grants, grantsOf)
	waitsOf := c.sectionWaits(sr)
	c.sectionAcquisitions(sr, grantsOf, waitsOf)
	c.sectionHandoffs(sr, grants, waitsOf)
	c.sectionTakeovers(sr, grants)
}

// sectionOwners is (m1) from the database's side: every section grant has an owner that holds its
// slot on the same host, and ends no later than its owner.
func (c *checkRun) sectionOwners(sr *SectionRun, grants []*Grant, grantsOf map[int64][]*Grant) {
	r := &c.r
	task := sr.Task
	// (m1) ownership, from the database's side.
	for _, g := range grants {
		owner, ok := sr.Owners[g.Exec]
		if !ok {
			r.add("m", task, g.Exec, "section granted to no owner")
			continue
		}
		grantsOf[owner] = append(grantsOf[owner], g)
		o, ok := c.grants[owner]
		switch {
		case !ok:
			r.add("m", task, g.Exec, "section granted for execution %d, which was never granted a slot", owner)
			continue
		case o.Task != sr.OwnerTask:
			r.add("m", task, g.Exec, "section granted for execution %d of task %s", owner, o.Task)
		case o.Host != g.Host:
			r.add("m", task, g.Exec, "section granted on %s for execution %d of %s", g.Host, owner, o.Host)
		case g.GrantedAt.Before(o.GrantedAt):
			r.add("m", task, g.Exec, "section granted at %s, before its owner %d was granted its slot (%s)", ts(g.GrantedAt), owner, ts(o.GrantedAt))
		}
		if !o.CompletedAt.IsZero() && o.ReclaimedAt.IsZero() {
			end := g.CompletedAt
			if end.IsZero() || (!g.ReclaimedAt.IsZero() && g.ReclaimedAt.Before(end)) {
				end = g.ReclaimedAt
			}
			if end.IsZero() || end.After(o.CompletedAt) {
				r.add("m", task, g.Exec, "owner %d completed at %s; its section was released %s", owner, ts(o.CompletedAt), tsOrNever(end))
			}
		}
	}
}

// sectionWaits is (m2): each wait ended as its timeout says, without error; it returns the
// waits by owner.
func (c *checkRun) sectionWaits(sr *SectionRun) map[int64][]*SectionWait {
	r := &c.r
	f := &r.Section
	task := sr.Task
	// (m1) from the ledgers' side, and (m2).
	waitsOf := map[int64][]*SectionWait{}
	for i := range sr.Waits {
		w := &sr.Waits[i]
		waitsOf[w.Owner] = append(waitsOf[w.Owner], w)
		switch w.Outcome {
		case SectionAcquired:
			f.Acquired++
		case ledger.SectionTimeout:
			f.TimedOut++
			if w.NotLimitReached {
				f.TimedOutNotLimit++
			}
			if took := w.At.Sub(w.RequestedAt); took < w.Timeout-time.Millisecond {
				r.add("m", task, w.Owner, "the wait on %s for the section timed out after %s; its timeout was %s", w.Host, took, w.Timeout)
			} else if took > w.Timeout+sr.HandoffBound {
				r.add("m", task, w.Owner, "the wait on %s for the section returned %s after it began; its timeout was %s", w.Host, took, w.Timeout)
			}
		case ledger.ResultError:
			r.add("m", task, w.Owner, "the wait on %s for the section failed: %s", w.Host, w.Error)
		}
	}
	return waitsOf
}

// sectionAcquisitions is (m1) from the ledgers' side: each owner's acquisitions match the
// database's grants.
func (c *checkRun) sectionAcquisitions(sr *SectionRun, grantsOf map[int64][]*Grant, waitsOf map[int64][]*SectionWait) {
	r := &c.r
	task := sr.Task
	owners := map[int64]bool{}
	for o := range grantsOf {
		owners[o] = true
	}
	for o := range waitsOf {
		owners[o] = true
	}
	for owner := range owners {
		acquired, pending := 0, false
		host := ""
		for _, w := range waitsOf[owner] {
			host = w.Host
			switch w.Outcome {
			case SectionAcquired:
				acquired++
			case "":
				pending = true
			}
		}
		gs := grantsOf[owner]
		if len(gs) > 0 {
			host = gs[0].Host
		}
		switch n := len(gs); {
		case n < acquired:
			r.add("m", task, owner, "the worker on %s acquired the section %d times for this execution; the database granted it %d times", host, acquired, n)
		case n > acquired && !(pending && n == acquired+1 && c.killed(host)):
			r.add("m", task, gs[0].Exec, "the database granted the section %d times for execution %d; its worker on %s acquired it %d times (a grant nobody knows it holds)",
				n, owner, host, acquired)
		}
	}

}

// sectionHandoffs is (m3): a waiter already queued at a release is granted within the bound.
func (c *checkRun) sectionHandoffs(sr *SectionRun, grants []*Grant, waitsOf map[int64][]*SectionWait) {
	r := &c.r
	f := &r.Section
	task := sr.Task
	// (m3) handoffs.
	for i := 1; i < len(grants); i++ {
		p, g := grants[i-1], grants[i]
		if p.CompletedAt.IsZero() || !p.ReclaimedAt.IsZero() {
			continue // a dead holder's: (m4)
		}
		gw := acquiredWait(waitsOf[sr.Owners[g.Exec]])
		if gw == nil || !gw.RequestedAt.Before(p.CompletedAt) {
			continue // not waiting at the release (or the sweeper's)
		}
		from, behind, excused := p.CompletedAt, false, false
		for j := range sr.Waits {
			w := &sr.Waits[j]
			if w == gw || !w.RequestedAt.Before(gw.RequestedAt) {
				continue
			}
			switch {
			case w.Outcome == "" && c.killed(w.Host) && c.h.Kills[w.Host].Before(g.GrantedAt) && g.GrantedAt.Sub(c.h.Kills[w.Host]) <= sr.DeadTicketLife:
				excused = true
			case w.Outcome == ledger.SectionTimeout && w.At.After(p.CompletedAt) && w.At.Before(g.GrantedAt):
				behind = true
				if w.At.After(from) {
					from = w.At
				}
			}
		}
		if excused {
			f.Excused++
			continue
		}
		gap := g.GrantedAt.Sub(from)
		f.Gaps = append(f.Gaps, gap)
		if behind {
			f.BehindTimeout++
		}
		if gap > sr.HandoffBound {
			what := "the release"
			if from.After(p.CompletedAt) {
				what = "a waiter ahead of it gave up"
			}
			r.add("m", task, g.Exec, "granted at %s, %s after %s (%s; released by execution %d at %s), although its waiter (on %s, since %s) was waiting: more than %s",
				ts(g.GrantedAt), gap.Round(time.Millisecond), what, ts(from), p.Exec, ts(p.CompletedAt), gw.Host, ts(gw.RequestedAt), sr.HandoffBound)
		}
	}

}

// sectionTakeovers is (m4): a section held at a SIGKILL is taken again within the bound.
func (c *checkRun) sectionTakeovers(sr *SectionRun, grants []*Grant) {
	r := &c.r
	f := &r.Section
	task := sr.Task
	// (m4) takeovers after a kill.
	for host, sent := range sr.KillSent {
		var held *Hold
		for i := range c.h.Holds {
			hd := &c.h.Holds[i]
			g, ok := c.grants[hd.Exec]
			if hd.Task == task && hd.Host == host && hd.Reason == "" && ok && g.GrantedAt.Before(sent) {
				held = hd
			}
		}
		if held == nil {
			continue
		}
		var next *Grant
		for _, g := range grants {
			if g.GrantedAt.After(sent) {
				next = g
				break
			}
		}
		if next == nil {
			r.add("m", task, held.Exec, "held by %s when it was killed (%s); never taken again", host, ts(sent))
			continue
		}
		lat := next.GrantedAt.Sub(sent)
		f.Takeovers = append(f.Takeovers, lat)
		if lat > sr.TakeoverBound {
			r.add("m", task, next.Exec, "held by execution %d on %s when it was killed (%s); taken again %s later, more than %s",
				held.Exec, host, ts(sent), lat.Round(time.Millisecond), sr.TakeoverBound)
		}
	}
}

func (c *checkRun) killed(host string) bool {
	_, ok := c.h.Kills[host]
	return ok
}

// acquiredWait is the wait of ws that acquired the section (nil if none).
func acquiredWait(ws []*SectionWait) *SectionWait {
	for _, w := range ws {
		if w.Outcome == SectionAcquired {
			return w
		}
	}
	return nil
}

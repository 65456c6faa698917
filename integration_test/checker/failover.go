package checker

import (
	"sort"
	"time"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// Switch is a database failover: the primary was killed at Killed, and the standby promoted in
// its place accepted writes from Writable on (the test's clock, which the servers share). A
// switch whose old primary is not killed (a demotion, a primary left running) takes for Killed
// an instant by which that primary committed no more grant: Writable will do when the old
// primary stopped first, or its commits waited for the standby promoted.
type Switch struct {
	Killed, Writable time.Time
	// Timeline is the timeline the new primary writes on (0: unknown). When known, the epoch
	// rule is checked (h): each task's first grant after Writable comes one death threshold
	// after it at the earliest, with a fence above Timeline << 40.
	Timeline int
}

// GrantKey names one grant across the histories of several primaries: an execution id may be
// handed out again after a failover (a sequence goes back with the lost WAL), its host and grant
// time may not.
type GrantKey struct {
	Exec      int64
	Host      string
	GrantedUS int64 // GrantedAt in µs since the Unix epoch
}

// KeyOf is g's key.
func KeyOf(exec int64, host string, grantedAt time.Time) GrantKey {
	return GrantKey{Exec: exec, Host: host, GrantedUS: grantedAt.UnixMicro()}
}

// MergeTimelines joins the grants the surviving primary holds (final) with those each killed
// primary held when it died (read from its data directory afterwards). A killed primary's grant
// that the final primary does not have (same execution, host and grant time) was lost in a
// failover: it is added with Lost set, once however many killed primaries had it (with
// LostCompletion if one saw it complete). A grant the final primary has without a completion,
// which a killed primary saw complete, gets LostCompletion. A lost grant whose execution id the
// merged history already uses is given a new, negative id; renamed maps its key to that id, so
// that the ledgers' events of it can follow (RenameLedger).
func MergeTimelines(final []Grant, killed ...[]Grant) (merged []Grant, renamed map[GrantKey]int64) {
	renamed = map[GrantKey]int64{}
	seen := map[GrantKey]int{} // → its index in final, or -1 for a lost grant
	ids := map[int64]bool{}
	merged = append(merged, final...)
	for i, g := range final {
		seen[KeyOf(g.Exec, g.Host, g.GrantedAt)] = i
		ids[g.Exec] = true
	}
	var lost []Grant
	for _, gs := range killed {
		for _, g := range gs {
			k := KeyOf(g.Exec, g.Host, g.GrantedAt)
			if i, ok := seen[k]; ok {
				if m := &merged[max(i, 0)]; i >= 0 && m.CompletedAt.IsZero() && m.LostCompletion.IsZero() && !g.CompletedAt.IsZero() {
					m.LostCompletion = g.CompletedAt
				}
				continue
			}
			seen[k] = -1
			g.Lost = true
			// Never ended: whatever the dead primary recorded after it, the new one never knew.
			// A completion it recorded is kept as lost: its holder's Complete succeeded.
			if g.ReclaimedAt.IsZero() {
				g.LostCompletion = g.CompletedAt
			}
			g.CompletedAt, g.ReclaimedAt, g.Failed = time.Time{}, time.Time{}, false
			lost = append(lost, g)
		}
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].GrantedAt.Before(lost[j].GrantedAt) })
	for _, g := range lost {
		if ids[g.Exec] {
			id := -g.Exec
			for ids[id] {
				id -= 1 << 40
			}
			renamed[KeyOf(g.Exec, g.Host, g.GrantedAt)] = id
			g.Exec = id
		}
		ids[g.Exec] = true
		merged = append(merged, g)
	}
	return merged, renamed
}

// RenameLedger gives the events of renamed grants their new ids, in evs: one ledger file's
// events in the order written (a grant is known by its execution, host and grant time; the stop
// and completion that follow it by its execution).
func RenameLedger(evs []ledger.Event, renamed map[GrantKey]int64) {
	cur := map[int64]int64{}
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case ledger.KindGrant:
			if id, ok := renamed[KeyOf(e.Exec, e.Host, e.GrantedAt)]; ok {
				cur[e.Exec] = id
				e.Exec = id
			} else {
				delete(cur, e.Exec)
			}
		case ledger.KindStop, ledger.KindComplete:
			if id, ok := cur[e.Exec]; ok {
				e.Exec = id
			}
		}
	}
}

// checkFailover is check (h). A lost grant's slot ceased to exist when its primary died: the new
// primary may give the task's slots to others from its first grant on. So that grant must come
// only once the lost holder is dead by the database's rule (its last heartbeat on the old primary
// plus its threshold: the holder cancels itself a safety margin earlier), and the holder must
// have stopped working by then.
func (c *checkRun) checkFailover() {
	r := &c.r
	byTask := map[string][]*Grant{}
	for i := range c.h.Grants {
		g := &c.h.Grants[i]
		byTask[g.Task] = append(byTask[g.Task], g)
	}
	for _, gs := range byTask {
		sort.Slice(gs, func(i, j int) bool { return gs[i].GrantedAt.Before(gs[j].GrantedAt) })
	}
	c.checkEpochs(byTask)
	for _, g := range c.h.Grants {
		if c.h.NoLoss && !g.LostCompletion.IsZero() {
			if hd, seen := c.holds[g.Exec]; seen && hd.Result == ledger.ResultOK {
				r.add("h", g.Task, g.Exec, "its completion at %s, which its holder on %s saw succeed, was lost in a failover under synchronous replication",
					ts(g.LostCompletion), g.Host)
			}
		}
		if !g.Lost {
			continue
		}
		hd, seen := c.holds[g.Exec]
		if !seen {
			r.LostUnseen[g.Task]++
			continue
		}
		r.Lost[g.Task]++
		if c.h.NoLoss {
			r.add("h", g.Task, g.Exec, "granted at %s to %s (fence %d), seen by its holder, and lost in a failover under synchronous replication",
				ts(g.GrantedAt), g.Host, g.Fence)
		}
		sw, ok := c.switchAfter(g.GrantedAt)
		if !ok {
			r.add("h", g.Task, g.Exec, "lost, but granted at %s, after the last failover", ts(g.GrantedAt))
			continue
		}
		var over *Grant
		for _, o := range byTask[g.Task] {
			if o.GrantedAt.After(sw.Killed) {
				over = o
				break
			}
		}
		if over == nil {
			continue
		}
		if silent := over.GrantedAt.Sub(g.LastKeepAlive); silent <= g.Threshold {
			r.add("h", g.Task, g.Exec, "lost when the primary died at %s (holder on %s, fence %d, last heartbeat %s), yet the new primary granted the task again %s after that heartbeat, within its threshold %s (exec %d, fence %d, at %s)",
				ts(sw.Killed), g.Host, g.Fence, ts(g.LastKeepAlive), silent.Round(time.Millisecond), g.Threshold, over.Exec, over.Fence, ts(over.GrantedAt))
		}
		if end, ok := holdEnd(hd, c.h.Kills); ok && !end.IsZero() && !end.Before(over.GrantedAt) {
			r.add("h", g.Task, g.Exec, "lost when the primary died at %s, its holder on %s worked until %s, after the new primary granted the task again at %s (exec %d, fence %d)",
				ts(sw.Killed), g.Host, ts(end), ts(over.GrantedAt), over.Exec, over.Fence)
		}
	}
}

// checkEpochs is the epoch rule of check (h) on every switch whose timeline is known: a new
// timeline grants nothing for one threshold after its primary became writable, then fences
// above its base.
func (c *checkRun) checkEpochs(byTask map[string][]*Grant) {
	r := &c.r
	for _, sw := range c.h.Switches {
		if sw.Timeline == 0 {
			continue
		}
		base := int64(sw.Timeline) << 40
		for task, gs := range byTask {
			for _, g := range gs {
				if g.Lost || !g.GrantedAt.After(sw.Writable) {
					continue
				}
				if d := g.GrantedAt.Sub(sw.Writable); d < g.Threshold {
					r.add("h", task, g.Exec, "granted at %s on %s, %s after timeline %d became writable (%s): within the epoch's hold of one threshold (%s)",
						ts(g.GrantedAt), g.Host, d.Round(time.Millisecond), sw.Timeline, ts(sw.Writable), g.Threshold)
				}
				if g.Fence <= base {
					r.add("h", task, g.Exec, "first grant after timeline %d became writable took fence %d, not above the epoch's base %d",
						sw.Timeline, g.Fence, base)
				}
				break
			}
		}
	}
}

// switchAfter is the first switch whose kill came after t.
func (c *checkRun) switchAfter(t time.Time) (Switch, bool) {
	for _, s := range c.h.Switches {
		if s.Killed.After(t) {
			return s, true
		}
	}
	return Switch{}, false
}

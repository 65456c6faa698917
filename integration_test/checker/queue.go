package checker

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Check (g): waiters are granted in queue order.
//
// What is observed. A worker cannot see its own place in line: the ticket and position of a
// WaitForSlot start live in execution.AcquireResult, which the public API does not return, and
// LastExecutions shows waiting tickets by host only (a Work process has ten waiters on one host).
// So the queue is observed from the outside: an observer reads the task row's queue column and
// fence in one statement every few milliseconds and writes each change to its ledger
// (ledger.KindQueue). A ticket there carries its id, its session (one per process), its priority,
// when it queued and when it was offered a slot, all on the database clock. The grants made
// between two snapshots are exactly those whose fences lie between the snapshots' fences (the
// fence of the row counts its grants); the database gives each its session and the priority it
// waited at.
//
// The rule. The design grants a ticket only while its position is below the number of free
// slots, and at the end of every transaction offers a slot to each of the first tickets that fit
// (offered tickets stay offered until they take their slot or their offer window lapses, when
// they go to the back of their priority with a new queueing time). So whenever a ticket behind
// ticket A is granted, A ends that transaction offered, granted, requeued or gone; and no start
// without a ticket is granted while a ticket waits unoffered. Hence, for two consecutive
// snapshots s1 and s2 and a ticket A present in both with the same queueing time and not offered
// in s2 (so never offered in between), every grant made between them must be of a ticket ahead of
// A: of a higher priority, or matched (by session) with a ticket ahead of A in s1 that is gone in
// s2. Anything else is a grant past A: out of order, barging, or a priority inversion.
//
// The tolerance. An offered ticket may be overtaken (its waiter is slow to take the slot: a
// process paused, killed, or busy), and a ticket whose offer lapsed goes to the back: both are
// counted (Report.Skipped, Report.Requeued), not reported. One more case breaks the reasoning
// above: a process's requests share a transaction (releases first, then acquires in order), so
// a waiter of a higher priority may be enqueued after a grant to a ticket behind A and before the
// offers are made, and take the offer A would have had (seen in a run: exec 345 granted to a
// priority-1 ticket behind an unoffered priority-1 ticket, and ticket 346, priority 5, of the
// same process enqueued in the same transaction). A ticket is therefore not judged in a window
// in which a ticket of a higher priority arrived, re-queued or was granted (Report.Displaced). Matching grants to vanished tickets by
// session can only excuse a grant (a ticket that vanished because its waiter gave up or died may
// excuse another grant of its process), never accuse one, so the rule reports nothing the design
// allows. Each snapshot must also be in queue order: priority not increasing, and within a
// priority, queueing times not decreasing.

// Ticket is one waiter in a task's queue.
type Ticket struct {
	ID        int64
	Session   int64
	Priority  int
	QueuedAt  time.Time
	OfferedAt time.Time // zero: not offered
}

// QueueSnapshot is a task's queue as the observer read it.
type QueueSnapshot struct {
	Task    string
	At      time.Time
	Fence   int64
	Tickets []Ticket // in queue (grant) order
}

// ParseQueue parses a task row's queue column: "W:<ticket>,P:<session>,R:<priority>,
// Q:<queued µs>,O:<offered µs>,…|…" (execution/queue.go); "" is an empty queue. Unknown keys are
// ignored; W, P, R, Q and O are required.
func ParseQueue(s string) ([]Ticket, error) {
	if s == "" {
		return nil, nil
	}
	var out []Ticket
	for i, part := range strings.Split(s, "|") {
		v := map[string]int64{}
		for _, f := range strings.Split(part, ",") {
			k, raw, ok := strings.Cut(f, ":")
			if !ok {
				return nil, fmt.Errorf("ticket %d (%q): field %q is not key:value", i, part, f)
			}
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ticket %d (%q): field %s: %w", i, part, k, err)
			}
			v[k] = n
		}
		for _, k := range []string{"W", "P", "R", "Q", "O"} {
			if _, ok := v[k]; !ok {
				return nil, fmt.Errorf("ticket %d (%q): no %s field", i, part, k)
			}
		}
		t := Ticket{ID: v["W"], Session: v["P"], Priority: int(v["R"]), QueuedAt: time.UnixMicro(v["Q"]).UTC()}
		if v["O"] != 0 {
			t.OfferedAt = time.UnixMicro(v["O"]).UTC()
		}
		out = append(out, t)
	}
	return out, nil
}

// maxQueueReports bounds the grant-order violations reported per task (the rest are counted).
const maxQueueReports = 20

// checkQueues is check (g).
func (c *checkRun) checkQueues() {
	r := &c.r
	snaps := map[string][]QueueSnapshot{}
	for _, s := range c.h.Queues {
		snaps[s.Task] = append(snaps[s.Task], s)
	}
	grants := map[string][]*Grant{}
	for _, g := range c.grants {
		grants[g.Task] = append(grants[g.Task], g)
	}
	for task, ss := range snaps {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].At.Before(ss[j].At) })
		gs := grants[task]
		sort.Slice(gs, func(i, j int) bool { return gs[i].Fence < gs[j].Fence })
		for _, s := range ss {
			checkQueueSorted(r, task, s)
		}
		reported, more := 0, 0
		for i := 1; i < len(ss); i++ {
			s1, s2 := ss[i-1], ss[i]
			if s2.Fence < s1.Fence {
				r.add("g", task, 0, "the task row's fence went from %d (%s) back to %d (%s)", s1.Fence, ts(s1.At), s2.Fence, ts(s2.At))
				continue
			}
			lo := sort.Search(len(gs), func(k int) bool { return gs[k].Fence > s1.Fence })
			hi := sort.Search(len(gs), func(k int) bool { return gs[k].Fence > s2.Fence })
			window := gs[lo:hi]
			pos1 := make(map[int64]int, len(s1.Tickets))
			for k, t := range s1.Tickets {
				pos1[t.ID] = k
			}
			in2 := make(map[int64]bool, len(s2.Tickets))
			for _, t := range s2.Tickets {
				in2[t.ID] = true
			}
			for _, a := range s2.Tickets {
				p, ok := pos1[a.ID]
				if !ok {
					continue
				}
				if !s1.Tickets[p].QueuedAt.Equal(a.QueuedAt) {
					r.Requeued[task]++ // its offer lapsed (or it was judged dead): back in line
					continue
				}
				if !s1.Tickets[p].OfferedAt.IsZero() && !s1.Tickets[p].OfferedAt.Equal(a.OfferedAt) {
					r.add("g", task, 0, "ticket %d (session %d) was offered a slot at %s (snapshot %s); at %s its offer is %s without its going to the back",
						a.ID, a.Session, ts(s1.Tickets[p].OfferedAt), ts(s1.At), ts(s2.At), tsOrNever(a.OfferedAt))
				}
				if len(window) == 0 {
					continue
				}
				ahead := map[int64]int{} // session → tickets ahead of a in s1, gone in s2
				for _, b := range s1.Tickets[:p] {
					if !in2[b.ID] {
						ahead[b.Session]++
					}
				}
				// A ticket of a higher priority that arrived (or re-queued) in the window may
				// have been enqueued in the very transaction that granted a ticket behind a,
				// after that grant and before the offers were made: it then took the offer a
				// would have had. Nothing can be concluded about a.
				displaced := false
				for _, b := range s2.Tickets {
					if b.Priority > a.Priority {
						if p1, ok := pos1[b.ID]; !ok || !s1.Tickets[p1].QueuedAt.Equal(b.QueuedAt) {
							displaced = true
							break
						}
					}
				}
				for _, g := range window {
					displaced = displaced || g.Priority > a.Priority
				}
				var past []*Grant // grants not accounted for by a ticket ahead of a
				for _, g := range window {
					if g.Priority > a.Priority {
						continue
					}
					if ahead[g.Session] > 0 {
						ahead[g.Session]--
						continue
					}
					past = append(past, g)
				}
				if !a.OfferedAt.IsZero() {
					if len(past) > 0 {
						r.Skipped[task]++ // offered and not yet taken: others may go first
					}
					continue
				}
				if displaced {
					if len(past) > 0 {
						r.Displaced[task]++
					}
					continue
				}
				r.QueueJudged[task]++
				for _, g := range past {
					if reported == maxQueueReports {
						more++
						continue
					}
					reported++
					r.add("g", task, g.Exec, "granted (fence %d, session %d, priority %d) between the snapshots at %s (fence %d) and %s (fence %d), "+
						"while ticket %d (session %d, priority %d, queued %s) waited ahead of it unoffered: %s → %s",
						g.Fence, g.Session, g.Priority, ts(s1.At), s1.Fence, ts(s2.At), s2.Fence, a.ID, a.Session, a.Priority, ts(a.QueuedAt),
						formatTickets(s1.Tickets), formatTickets(s2.Tickets))
				}
			}
		}
		if more > 0 {
			r.add("g", task, 0, "%d more grants past an unoffered ticket", more)
		}
	}
}

// checkQueueSorted reports a snapshot that is not in queue order.
func checkQueueSorted(r *Report, task string, s QueueSnapshot) {
	seen := map[int64]bool{}
	for k, t := range s.Tickets {
		if seen[t.ID] {
			r.add("g", task, 0, "ticket %d twice in the queue at %s: %s", t.ID, ts(s.At), formatTickets(s.Tickets))
			return
		}
		seen[t.ID] = true
		if k == 0 {
			continue
		}
		p := s.Tickets[k-1]
		if t.Priority > p.Priority || (t.Priority == p.Priority && t.QueuedAt.Before(p.QueuedAt)) {
			r.add("g", task, 0, "queue out of order at %s: ticket %d (priority %d, queued %s) behind ticket %d (priority %d, queued %s)",
				ts(s.At), t.ID, t.Priority, ts(t.QueuedAt), p.ID, p.Priority, ts(p.QueuedAt))
			return
		}
	}
}

// formatTickets shows a queue briefly: id/session/priority, * if offered.
func formatTickets(ts []Ticket) string {
	const most = 12
	var b strings.Builder
	b.WriteByte('[')
	for i, t := range ts {
		if i == most {
			fmt.Fprintf(&b, " …%d more", len(ts)-most)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d/s%d/p%d", t.ID, t.Session, t.Priority)
		if !t.OfferedAt.IsZero() {
			b.WriteByte('*')
		}
	}
	b.WriteByte(']')
	return b.String()
}

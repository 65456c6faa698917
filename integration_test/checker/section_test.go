package checker

import (
	"testing"
	"time"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

const sectionTask = "o [critical section]"

// sectionHistory is a valid critical-section run: the executions 1–4 of task "o" (limit 16) ask
// for its section (a task of limit 1). Exec 1 (w1) gets it (section exec 11) and releases it;
// exec 4 (w1), queued first, times out; exec 2 (w2) gets it next (section exec 12), and its
// process is killed at 1000 ms while it holds it (SIGKILL sent at 995 ms; last heartbeat 900 ms,
// threshold 1 s); exec 3 (w3), waiting since 130 ms, takes it over at 1910 ms (section exec 13).
func sectionHistory() History {
	grant := func(exec, fence int64, task, host string, granted, completed, reclaimed, hb int) Grant {
		g := Grant{Exec: exec, Task: task, Host: host, Fence: fence, GrantedAt: at(granted), LastKeepAlive: at(hb), Threshold: time.Second}
		if completed > 0 {
			g.CompletedAt = at(completed)
		}
		if reclaimed > 0 {
			g.ReclaimedAt = at(reclaimed)
		}
		return g
	}
	wait := func(owner int64, host string, requested int, timeout time.Duration, outcome string, returned int) SectionWait {
		return SectionWait{Owner: owner, Host: host, RequestedAt: at(requested), Timeout: timeout, Outcome: outcome, At: at(returned)}
	}
	return History{
		InitialLimit: map[string]int{"o": 16, sectionTask: 1},
		Grants: []Grant{
			grant(1, 1, "o", "w1", 0, 500, 0, 490),
			grant(2, 2, "o", "w2", 1, 0, 2500, 900),
			grant(3, 3, "o", "w3", 2, 2500, 0, 2490),
			grant(4, 4, "o", "w1", 3, 200, 0, 190),
			grant(11, 1, sectionTask, "w1", 100, 150, 0, 140),
			grant(12, 2, sectionTask, "w2", 160, 0, 1910, 900),
			grant(13, 3, sectionTask, "w3", 1910, 1960, 0, 1950),
		},
		Holds: []Hold{
			{Exec: 11, Task: sectionTask, Host: "w1", Fence: 1, ReturnedAt: at(101), StopAt: at(140), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK},
			{Exec: 12, Task: sectionTask, Host: "w2", Fence: 2, ReturnedAt: at(161)}, // killed while holding
			{Exec: 13, Task: sectionTask, Host: "w3", Fence: 3, ReturnedAt: at(1911), StopAt: at(1950), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK},
		},
		Kills: map[string]time.Time{"w2": at(1000)},
		Section: &SectionRun{Task: sectionTask, OwnerTask: "o",
			Owners: map[int64]int64{11: 1, 12: 2, 13: 3},
			Waits: []SectionWait{
				wait(1, "w1", 90, 10*time.Second, SectionAcquired, 101),
				wait(4, "w1", 95, 20*time.Millisecond, ledger.SectionTimeout, 116),
				wait(2, "w2", 120, 10*time.Second, SectionAcquired, 161),
				wait(3, "w3", 130, 10*time.Second, SectionAcquired, 1911),
			},
			KillSent:      map[string]time.Time{"w2": at(995)},
			TakeoverBound: 1250 * time.Millisecond, HandoffBound: 500 * time.Millisecond, DeadTicketLife: 2250 * time.Millisecond,
		},
	}
}

func TestSectionHistoryPasses(t *testing.T) {
	r := Check(sectionHistory())
	if len(r.Violations) > 0 {
		t.Fatalf("violations on a valid section history: %v", r.Violations)
	}
	f := r.Section
	if f.Grants != 3 || f.Acquired != 3 || f.TimedOut != 1 || len(f.Gaps) != 1 || f.Gaps[0] != 10*time.Millisecond ||
		len(f.Takeovers) != 1 || f.Takeovers[0] != 915*time.Millisecond || r.MaxHolders[sectionTask] != 1 {
		t.Fatalf("figures %+v, max holders %d", f, r.MaxHolders[sectionTask])
	}
}

// TestCheckerCatchesSectionFaults breaks the section history in one way per case: each must be
// reported by the check named.
func TestCheckerCatchesSectionFaults(t *testing.T) {
	cases := []struct {
		name  string
		check string
		want  string
		edit  func(h *History)
	}{
		// Mutual exclusion is check (a) on the section's task: a killed holder holds until its kill.
		{"taken over while the killed holder still held it", "a", "2 holders", func(h *History) {
			h.Grants[6].GrantedAt, h.Grants[5].ReclaimedAt = at(990), at(990)
			h.Section.Waits[3].At = at(991)
		}},
		{"two holders at once", "a", "2 holders", func(h *History) { h.Holds[0].StopAt = at(170) }},
		// (m1) ownership.
		{"a section grant without an owner", "m", "section granted to no owner", func(h *History) { delete(h.Section.Owners, 13) }},
		{"owner never granted", "m", "which was never granted a slot", func(h *History) { h.Section.Owners[13] = 99 }},
		{"owner on another host", "m", "section granted on w3 for execution 3 of w9", func(h *History) { h.Grants[2].Host = "w9" }},
		{"section before its owner", "m", "before its owner 3 was granted its slot", func(h *History) { h.Grants[2].GrantedAt = at(1950) }},
		{"section outlived its owner", "m", "owner 1 completed at", func(h *History) { h.Grants[0].CompletedAt = at(120) }},
		{"a grant the waiter never learned of", "m", "a grant nobody knows it holds", func(h *History) {
			h.Grants = append(h.Grants, Grant{Exec: 14, Task: sectionTask, Host: "w1", Fence: 4, GrantedAt: at(1970), CompletedAt: at(1980),
				LastKeepAlive: at(1975), Threshold: time.Second})
			h.Section.Owners[14] = 4
		}},
		{"acquired without a grant", "m", "acquired the section 2 times", func(h *History) {
			h.Section.Waits = append(h.Section.Waits, SectionWait{Owner: 1, Host: "w1", RequestedAt: at(300), Outcome: SectionAcquired, At: at(301)})
		}},
		// (m2) timeouts.
		{"timed out early", "m", "timed out after 10ms; its timeout was 20ms", func(h *History) { h.Section.Waits[1].At = at(105) }},
		{"timed out late", "m", "returned 600ms after it began; its timeout was 20ms", func(h *History) { h.Section.Waits[1].At = at(695) }},
		{"wait failed", "m", "failed: boom", func(h *History) {
			h.Section.Waits[1].Outcome, h.Section.Waits[1].Error = ledger.ResultError, "boom"
		}},
		// (m3) handoffs.
		{"slow handoff", "m", "550ms after the release", func(h *History) { h.Grants[5].GrantedAt = at(700) }},
		{"a waiter that gave up held the line", "m", "after a waiter ahead of it gave up", func(h *History) {
			// Exec 4's wait, queued ahead of exec 2's, gave up at 600 ms; exec 2 got the section
			// only 600 ms later.
			h.Section.Waits[1].Timeout, h.Section.Waits[1].At = 505*time.Millisecond, at(600)
			h.Grants[5].GrantedAt = at(1200)
			h.Section.KillSent["w2"], h.Kills["w2"] = at(1395), at(1400)
			h.Grants[5].LastKeepAlive = at(1300)
			h.Grants[5].ReclaimedAt, h.Grants[6].GrantedAt = at(2310), at(2310)
			h.Grants[6].CompletedAt, h.Holds[2].StopAt, h.Section.Waits[3].At = at(2360), at(2350), at(2311)
			h.Grants[2].CompletedAt = at(2500)
		}},
		// (m4) takeovers.
		{"slow takeover after a kill", "m", "taken again 1.305s later, more than 1.25s", func(h *History) {
			h.Grants[5].ReclaimedAt, h.Grants[6].GrantedAt = at(2300), at(2300)
			h.Grants[6].CompletedAt, h.Holds[2].StopAt, h.Section.Waits[3].At = at(2350), at(2340), at(2301)
		}},
		{"never taken again", "m", "never taken again", func(h *History) {
			h.Grants = h.Grants[:6]
			h.Holds = h.Holds[:2]
			h.Section.Waits = h.Section.Waits[:3]
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := sectionHistory()
			c.edit(&h)
			requireViolation(t, Check(h), c.check, c.want)
		})
	}
}

// TestSectionTolerance: what the design allows is not reported.
func TestSectionTolerance(t *testing.T) {
	t.Run("a waiter that gave up ahead delays nobody beyond the bound", func(t *testing.T) {
		h := sectionHistory()
		// Exec 4's wait gave up at 600 ms; exec 2 got the section 100 ms later.
		h.Section.Waits[1].Timeout, h.Section.Waits[1].At = 505*time.Millisecond, at(600)
		h.Grants[5].GrantedAt = at(700)
		r := Check(h)
		if len(r.Violations) > 0 || r.Section.BehindTimeout != 1 || r.Section.Gaps[0] != 100*time.Millisecond {
			t.Fatalf("violations %v, figures %+v", r.Violations, r.Section)
		}
	})
	t.Run("a killed process's waiter ahead excuses a slow handoff", func(t *testing.T) {
		h := sectionHistory()
		// w5's waiter queued first and its process died at 50 ms: its ticket may be offered
		// the section until its session is judged dead.
		h.Kills["w5"] = at(50)
		h.Section.Waits = append(h.Section.Waits, SectionWait{Owner: 5, Host: "w5", RequestedAt: at(40)})
		h.Grants = append(h.Grants, Grant{Exec: 5, Task: "o", Host: "w5", Fence: 5, GrantedAt: at(4), ReclaimedAt: at(2500),
			LastKeepAlive: at(45), Threshold: time.Second})
		h.Grants[5].GrantedAt = at(700)
		r := Check(h)
		if len(r.Violations) > 0 || r.Section.Excused != 1 {
			t.Fatalf("violations %v, figures %+v", r.Violations, r.Section)
		}
	})
}

package checker

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/integration_test/ledger"
	"github.com/taskling-go/taskling/tokens"
)

const epoch2 = int64(1) << 40 // the first fence of timeline 2 under an epoch rule

// failoverHistory is a valid run of task "t" (limit 1) across a failover: exec 1 completes on
// the first primary; exec 2 is granted there at 200 ms and lost when the primary dies at 300 ms
// (an asynchronous standby never had it); its holder cancels itself at 1 300 ms; the new
// primary, writable at 600 ms, grants nothing before the lost holder is dead by the rule (last
// heartbeat 200 ms + threshold 2 s), then grants exec 3 in a new fence epoch; the sweep (exec 4)
// takes and returns the slot.
func failoverHistory() History {
	g := func(exec, fence int64, host string, granted, completed, hb int) Grant {
		return Grant{Exec: exec, Task: "t", Host: host, Fence: fence, GrantedAt: at(granted), CompletedAt: at(completed), LastKeepAlive: at(hb), Threshold: threshold}
	}
	lost := g(2, 2, "w2", 200, 0, 200)
	lost.CompletedAt, lost.Lost = time.Time{}, true
	hold := func(exec, fence int64, host string, granted, stop int, reason, result string) Hold {
		return Hold{Exec: exec, Task: "t", Host: host, Fence: fence, GrantedAt: at(granted), ReturnedAt: at(granted + 2), StopAt: at(stop), Reason: reason, Result: result}
	}
	return History{
		InitialLimit: map[string]int{"t": 1},
		Grants: []Grant{
			g(1, 1, "w1", 0, 100, 50),
			lost,
			g(3, epoch2+1, "w1", 2300, 2400, 2350),
			g(4, epoch2+2, "sweeper", 5000, 5100, 5000),
		},
		Holds: []Hold{
			hold(1, 1, "w1", 0, 90, ledger.ReasonCompleted, ledger.ResultOK),
			hold(2, 2, "w2", 200, 1300, ledger.ReasonLeaseLost, ledger.ResultLeaseLost),
			hold(3, epoch2+1, "w1", 2300, 2390, ledger.ReasonCompleted, ledger.ResultOK),
			hold(4, epoch2+2, "sweeper", 5000, 5090, ledger.ReasonCompleted, ledger.ResultOK),
		},
		Switches: []Switch{{Killed: at(300), Writable: at(600)}},
		Before: map[string]TaskState{"t": {
			Tokens: tokens.List{Tokens: []tokens.Token{{ID: uuid.New(), Status: tokens.Available, Grantee: 3}}},
			Fence:  epoch2 + 1,
		}},
		After: map[string]TaskState{"t": {
			Tokens: tokens.List{Tokens: []tokens.Token{{ID: uuid.New(), Status: tokens.Available, Grantee: 4}}},
			Fence:  epoch2 + 2,
		}},
		LeaseTTL: 1500 * time.Millisecond,
		Grace:    time.Second,
	}
}

func TestFailoverHistoryPasses(t *testing.T) {
	r := Check(failoverHistory())
	if len(r.Violations) > 0 {
		t.Fatalf("violations on a clean failover history: %v", r.Violations)
	}
	if r.Lost["t"] != 1 || r.LostUnseen["t"] != 0 || r.Unrecorded["t"] != 0 {
		t.Fatalf("lost %d, unseen %d, unrecorded %d", r.Lost["t"], r.LostUnseen["t"], r.Unrecorded["t"])
	}
}

// TestCheckerCatchesFailoverHazards breaks the failover history the ways an asynchronous
// failover without a rule does.
func TestCheckerCatchesFailoverHazards(t *testing.T) {
	cases := []struct {
		name, check, want string
		edit              func(h *History)
	}{
		{"fence reused after the switch", "b", "lost in a failover: its fence handed out again", func(h *History) {
			h.Grants[2].Fence, h.Holds[2].Fence = 2, 2
			h.Grants[3].Fence, h.Holds[3].Fence = 3, 3
			st := h.After["t"]
			st.Fence = 3
			h.After["t"] = st
		}},
		{"granted again within the lost holder's threshold", "h", "within its threshold", func(h *History) {
			h.Grants[2].GrantedAt = at(1400) // after the holder stopped, before it was dead by the rule
		}},
		{"lost holder still working at the new grant", "h", "worked until", func(h *History) {
			h.Holds[1].StopAt = at(2350)
		}},
		{"two holders across the switch", "a", "2 holders", func(h *History) {
			h.Grants[2].GrantedAt = at(800)
		}},
		{"Complete of a lost grant succeeded", "c", "no completion", func(h *History) {
			h.Holds[1].Result = ledger.ResultOK
		}},
		{"Complete of a lost grant succeeded on no primary", "c", "no completion", func(h *History) {
			h.Holds[1].Result = ledger.ResultOK
			h.Grants[1].LostCompletion = time.Time{}
		}},
		{"a lost grant after the last switch", "h", "after the last failover", func(h *History) {
			h.Switches[0].Killed = at(150)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := failoverHistory()
			c.edit(&h)
			requireViolation(t, Check(h), c.check, c.want)
		})
	}
}

// A completion lost in a failover keeps the slot held on the new primary until it reclaims it:
// the holder's successful Complete came before that reclaim, and is no violation.
func TestLostCompletion(t *testing.T) {
	h := failoverHistory()
	// Exec 1 completed on the dead primary at 100 ms; the new primary reclaimed it at 2 300 ms.
	h.Grants[0].CompletedAt, h.Grants[0].ReclaimedAt, h.Grants[0].LostCompletion = time.Time{}, at(2300), at(100)
	if r := Check(h); len(r.Violations) > 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
	h.Grants[0].LostCompletion = time.Time{}
	requireViolation(t, Check(h), "e", "Complete succeeded although")
}

// A lost grant that no holder saw (its reply never arrived) reached nobody: its fence may come
// again, and no holder had to stop.
func TestLostGrantNobodySaw(t *testing.T) {
	h := failoverHistory()
	h.Holds = append(h.Holds[:1], h.Holds[2:]...)
	h.Grants[2].GrantedAt = at(700)
	h.Grants[2].Fence, h.Holds[1].Fence = 2, 2
	r := Check(h)
	if len(r.Violations) > 0 || r.LostUnseen["t"] != 1 || r.Lost["t"] != 0 {
		t.Fatalf("violations %v, unseen %d, lost %d", r.Violations, r.LostUnseen["t"], r.Lost["t"])
	}
}

func TestMergeTimelines(t *testing.T) {
	g := func(exec int64, host string, granted int) Grant {
		return Grant{Exec: exec, Task: "t", Host: host, GrantedAt: at(granted)}
	}
	done := g(1, "w1", 0)
	done.CompletedAt = at(50)
	final := []Grant{done, g(2, "w1", 100), g(5, "w3", 900), g(6, "w1", 400)}
	// The dead primary had exec 1 (replicated), exec 2 before it completed, and exec 3 and 5,
	// which never reached the new primary; the new primary handed id 5 out again.
	deadDone := g(3, "w2", 200)
	deadDone.CompletedAt = at(250) // completed on the dead primary only: still lost
	// Exec 6 completed on the dead primary too, but the new one never had that completion.
	sixDone := g(6, "w1", 400)
	sixDone.CompletedAt = at(450)
	killed := []Grant{g(1, "w1", 0), g(2, "w1", 100), deadDone, g(5, "w2", 300), sixDone}
	merged, renamed := MergeTimelines(final, killed, []Grant{g(3, "w2", 200), sixDone})
	if len(merged) != 6 {
		t.Fatalf("merged %d grants: %+v", len(merged), merged)
	}
	lost := map[int64]Grant{}
	for _, m := range merged {
		if m.Lost {
			lost[m.Exec] = m
		}
	}
	if len(lost) != 2 || !lost[3].CompletedAt.IsZero() || !lost[3].LostCompletion.Equal(at(250)) || lost[-5].Host != "w2" {
		t.Fatalf("lost grants %+v", lost)
	}
	if !merged[3].LostCompletion.Equal(at(450)) || !merged[0].LostCompletion.IsZero() || !merged[1].LostCompletion.IsZero() {
		t.Fatalf("lost completions: %v, %v, %v", merged[3].LostCompletion, merged[0].LostCompletion, merged[1].LostCompletion)
	}
	if id := renamed[KeyOf(5, "w2", at(300))]; id != -5 || len(renamed) != 1 {
		t.Fatalf("renamed %v", renamed)
	}
	evs := []ledger.Event{
		{Kind: ledger.KindGrant, Exec: 5, Host: "w2", GrantedAt: at(300)},
		{Kind: ledger.KindStop, Exec: 5, Host: "w2"},
		{Kind: ledger.KindComplete, Exec: 5, Host: "w2"},
		{Kind: ledger.KindGrant, Exec: 5, Host: "w2", GrantedAt: at(900)}, // (not in this history)
		{Kind: ledger.KindStop, Exec: 5, Host: "w2"},
	}
	RenameLedger(evs, renamed)
	for i, want := range []int64{-5, -5, -5, 5, 5} {
		if evs[i].Exec != want {
			t.Fatalf("event %d renamed to exec %d, want %d", i, evs[i].Exec, want)
		}
	}
}

// epochHistory is failoverHistory with the new timeline known (1, whose fences start above
// 1 << 40) and the new primary's first grant one threshold after it became writable.
func epochHistory() History {
	h := failoverHistory()
	h.Switches[0].Timeline = 1
	h.Grants[2].GrantedAt, h.Grants[2].CompletedAt, h.Grants[2].LastKeepAlive = at(2700), at(2800), at(2750)
	h.Holds[2].GrantedAt, h.Holds[2].ReturnedAt, h.Holds[2].StopAt = at(2700), at(2702), at(2790)
	return h
}

// TestEpochRule: on a new timeline each task's first grant waits one threshold after the new
// primary became writable, and takes a fence above the timeline's base.
func TestEpochRule(t *testing.T) {
	if r := Check(epochHistory()); len(r.Violations) > 0 {
		t.Fatalf("violations on a clean history: %v", r.Violations)
	}
	h := epochHistory()
	h.Grants[2].GrantedAt, h.Holds[2].GrantedAt = at(2500), at(2500) // after the lost holder died, inside the hold
	requireViolation(t, Check(h), "h", "within the epoch's hold")
	h = epochHistory()
	h.Switches[0].Timeline = 2 // fences at 1 << 40 are below timeline 2's base
	requireViolation(t, Check(h), "h", "not above the epoch's base")
}

// TestNoLoss: under synchronous replication a lost grant its holder saw, or a lost completion
// its holder saw succeed, is a violation; a lost grant nobody saw is not.
func TestNoLoss(t *testing.T) {
	h := failoverHistory()
	h.NoLoss = true
	requireViolation(t, Check(h), "h", "lost in a failover under synchronous replication")

	h = failoverHistory()
	h.NoLoss = true
	h.Holds = append(h.Holds[:1], h.Holds[2:]...)
	h.Grants[2].GrantedAt = at(700)
	h.Grants[2].Fence, h.Holds[1].Fence = 2, 2
	if r := Check(h); len(r.Violations) > 0 {
		t.Fatalf("a lost grant nobody saw: %v", r.Violations)
	}

	h = failoverHistory()
	h.Holds = append(h.Holds[:1], h.Holds[2:]...) // no lost grant seen
	h.Grants[2].GrantedAt = at(700)
	h.Grants[2].Fence, h.Holds[1].Fence = 2, 2
	h.Grants[0].CompletedAt, h.Grants[0].ReclaimedAt, h.Grants[0].LostCompletion = time.Time{}, at(2300), at(100)
	if r := Check(h); len(r.Violations) > 0 {
		t.Fatalf("a lost completion without NoLoss: %v", r.Violations)
	}
	h.NoLoss = true
	requireViolation(t, Check(h), "h", "saw succeed, was lost")
}

// TestSubmissionRunAgainAfterALostCompletion: a submission whose first completion a failover
// lost runs again; the second success is no violation of (s), unless the first was not lost.
func TestSubmissionRunAgainAfterALostCompletion(t *testing.T) {
	h := History{
		InitialLimit: map[string]int{"t": 1},
		Grants: []Grant{
			{Exec: 1, Task: "t", Host: "w1", Fence: 1, GrantedAt: at(0), ReclaimedAt: at(2300), LostCompletion: at(100), LastKeepAlive: at(50), Threshold: threshold},
			{Exec: 2, Task: "t", Host: "w2", Fence: 2, GrantedAt: at(2400), CompletedAt: at(2500), LastKeepAlive: at(2450), Threshold: threshold},
		},
		Holds: []Hold{
			{Exec: 1, Task: "t", Host: "w1", Fence: 1, GrantedAt: at(0), ReturnedAt: at(2), StopAt: at(90), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK, Submission: 7, Attempt: 1},
			{Exec: 2, Task: "t", Host: "w2", Fence: 2, GrantedAt: at(2400), ReturnedAt: at(2402), StopAt: at(2490), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK, Submission: 7, Attempt: 2},
		},
		Submissions: []SubmissionState{{ID: 7, Task: "t", Status: "completed", Attempts: 2, MaxAttempts: 5, ExecutionID: 2,
			Runs: []AttemptRun{{Attempt: 1, Exec: 1}, {Attempt: 2, Exec: 2}}}},
		Switches: []Switch{{Killed: at(300), Writable: at(600)}},
	}
	r := Check(h)
	if len(r.Violations) > 0 || r.SubmissionCompletionsLost != 1 {
		t.Fatalf("violations %v, completions lost %d", r.Violations, r.SubmissionCompletionsLost)
	}
	h.Grants[0].LostCompletion = time.Time{}
	requireViolation(t, Check(h), "s", "2 successful completions")
}

package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/integration_test/ledger"
	"github.com/taskling-go/taskling/tokens"
)

var t0 = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

const threshold = 2 * time.Second

// cleanHistory is a valid run of task "t" with limit 1: exec 1 completes, exec 2 is killed and
// its slot reclaimed by exec 3 after the threshold, exec 4 loses its lease during a partition and
// is reclaimed by exec 5, and the sweep (exec 6) takes and returns the slot.
func cleanHistory() History {
	g := func(exec, fence int64, host string, granted, completed, reclaimed, hb int) Grant {
		gr := Grant{Exec: exec, Task: "t", Host: host, Fence: fence, GrantedAt: at(granted), LastKeepAlive: at(hb), Threshold: threshold}
		if completed > 0 {
			gr.CompletedAt = at(completed)
		}
		if reclaimed > 0 {
			gr.ReclaimedAt = at(reclaimed)
		}
		return gr
	}
	return History{
		InitialLimit: map[string]int{"t": 1},
		Grants: []Grant{
			g(1, 1, "w1", 0, 100, 0, 50),
			g(2, 2, "w2", 110, 0, 2500, 300),
			g(3, 3, "w1", 2500, 2600, 0, 2550),
			g(4, 4, "w3", 2700, 7000, 5500, 3000),
			g(5, 5, "w1", 5500, 5600, 0, 5550),
			g(6, 6, "sweeper", 8000, 8100, 0, 8000),
		},
		Holds: []Hold{
			{Exec: 1, Task: "t", Host: "w1", Fence: 1, ReturnedAt: at(2), StopAt: at(90), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK},
			{Exec: 2, Task: "t", Host: "w2", Fence: 2, ReturnedAt: at(112)},
			{Exec: 3, Task: "t", Host: "w1", Fence: 3, ReturnedAt: at(2502), StopAt: at(2590), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK},
			{Exec: 4, Task: "t", Host: "w3", Fence: 4, ReturnedAt: at(2702), StopAt: at(4100), Reason: ledger.ReasonLeaseLost, Observed: at(4100), Result: ledger.ResultLeaseLost},
			{Exec: 5, Task: "t", Host: "w1", Fence: 5, ReturnedAt: at(5502), StopAt: at(5590), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK},
			{Exec: 6, Task: "t", Host: "sweeper", Fence: 6, ReturnedAt: at(8001), StopAt: at(8090), Reason: ledger.ReasonCompleted, Result: ledger.ResultOK},
		},
		Kills:   map[string]time.Time{"w2": at(400)},
		Outages: []Window{{Host: "w3", Start: at(3100), End: at(6000), Fault: "partition"}},
		Before: map[string]TaskState{"t": {
			Tokens: tokens.List{Tokens: []tokens.Token{{ID: uuid.New(), Status: tokens.Available, Grantee: 5}}},
			Fence:  5,
		}},
		After: map[string]TaskState{"t": {
			Tokens: tokens.List{Tokens: []tokens.Token{{ID: uuid.New(), Status: tokens.Available, Grantee: 6}}},
			Fence:  6,
		}},
		LeaseTTL: 1500 * time.Millisecond,
		Grace:    time.Second,
	}
}

func TestCleanHistoryPasses(t *testing.T) {
	r := Check(cleanHistory())
	if len(r.Violations) > 0 {
		t.Fatalf("violations on a clean history: %v", r.Violations)
	}
	if r.MaxHolders["t"] != 1 || r.Holders["t"] != 6 {
		t.Fatalf("max holders %d, holders %d", r.MaxHolders["t"], r.Holders["t"])
	}
}

// Grants to tickets that nobody took (direct handoff, lapsed or pending) carry fences but no
// execution: counted, and a pending one holds its token before the sweep.
func TestGrantsToTicketsNeverTakenPass(t *testing.T) {
	h := cleanHistory()
	before := h.Before["t"]
	before.Tokens.Tokens[0] = tokens.Token{ID: uuid.New(), Status: tokens.Held, Grantee: 60}
	before.Pending, before.Handed = []int64{60}, []int64{6}
	h.Before["t"] = before
	for i := range h.Grants[5:] { // the sweep's grant comes after the pending one lapsed
		h.Grants[5+i].Fence++
		h.Holds[5+i].Fence++
	}
	after := h.After["t"]
	after.Fence, after.Handed = 7, []int64{6}
	h.After["t"] = after
	if r := Check(h); len(r.Violations) > 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
}

// TestCheckerCatches breaks a clean history in one way per case and expects the checker to say so.
func TestCheckerCatches(t *testing.T) {
	cases := []struct {
		name  string
		check string
		want  string
		edit  func(h *History)
	}{
		{"overlap", "a", "2 holders", func(h *History) {
			h.Holds[0].StopAt = at(200) // exec 1 still works after exec 2's grant at 110
		}},
		{"overlap with a killed holder", "a", "2 holders", func(h *History) {
			h.Kills["w2"] = at(2600) // exec 2 was alive when exec 3 was granted; reclaim also late
		}},
		{"lowered limit", "a", "limit in force 1", func(h *History) {
			h.InitialLimit["t"] = 2
			h.Limits = []LimitChange{{Task: "t", Start: at(50), End: at(60), Limit: 1}}
			// exec 2 granted at 110 under limit 1 while exec 1 still worked.
			h.Holds[0].StopAt = at(150)
		}},
		{"stopped before its grant", "a", "before its grant", func(h *History) {
			h.Holds[0].StopAt = at(-1)
		}},
		{"fence backwards", "b", "fence 2 granted", func(h *History) {
			h.Grants[2].Fence = 2
			h.Holds[2].Fence = 2
		}},
		{"holder saw another fence", "b", "holder saw fence", func(h *History) {
			h.Holds[0].Fence = 7
		}},
		{"leaked slot", "c", "a leaked slot", func(h *History) {
			h.Grants[1].ReclaimedAt = time.Time{}
		}},
		{"reclaimed while alive", "c", "within its threshold", func(h *History) {
			h.Grants[1].LastKeepAlive = at(2000)
		}},
		{"ledger grant unknown to the DB", "c", "never granted", func(h *History) {
			h.Holds = append(h.Holds, Hold{Exec: 99, Task: "t", Host: "w9", StopAt: at(1)})
		}},
		{"holder never stopped", "c", "never stopped", func(h *History) {
			delete(h.Kills, "w2")
		}},
		{"token list disagrees", "d", "token list holds", func(h *History) {
			st := h.Before["t"]
			st.Tokens.Tokens[0].Status = tokens.Held
			h.Before["t"] = st
		}},
		{"fence counter disagrees", "d", "recorded 6 grants", func(h *History) {
			st := h.After["t"]
			st.Fence = 7
			h.After["t"] = st
		}},
		{"a grant to a ticket not counted", "d", "but the last grant has fence 6", func(h *History) {
			st := h.After["t"]
			st.Fence, st.Handed = 7, []int64{5} // fence 7 went to no execution, yet 5 is counted
			h.After["t"] = st
		}},
		{"a slot granted to a ticket held after the sweep", "d", "still not taken: [60]", func(h *History) {
			st := h.After["t"]
			st.Pending = []int64{60}
			h.After["t"] = st
		}},
		{"token count after sweep", "d", "2 tokens, limit 1", func(h *History) {
			st := h.After["t"]
			st.Tokens.Tokens = append(st.Tokens.Tokens, tokens.Token{ID: uuid.New(), Status: tokens.Available})
			h.After["t"] = st
		}},
		{"worked after reclaim", "e", "after its slot was reclaimed", func(h *History) {
			h.Holds[3].StopAt = at(5600)
		}},
		{"complete of a reclaimed execution succeeded", "e", "Complete succeeded although", func(h *History) {
			h.Holds[3].Result = ledger.ResultOK
		}},
		{"no self-cancellation in an outage", "f", "past its lease", func(h *History) {
			h.Holds[3].StopAt = at(4700)
			h.Grants[3].ReclaimedAt = at(5500)
		}},
		{"no self-cancellation while the server was down", "f", "past its lease", func(h *History) {
			h.Outages = []Window{{Start: at(2800), End: at(5000), Fault: "pg restart"}}
			h.Holds[3].StopAt = at(4400) // lease from before 2800 ends by 4300
		}},
		{"short pause cancelled a holder", "f", "lease lost at", func(h *History) {
			h.ShortPauses = []Window{{Host: "w3", Start: at(2800), End: at(3300), Fault: "sigstop-short"}}
			h.Holds[3].Observed = at(3400)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := cleanHistory()
			c.edit(&h)
			requireViolation(t, Check(h), c.check, c.want)
		})
	}
}

func TestLimitFor(t *testing.T) {
	cs := []LimitChange{
		{Task: "t", Start: at(100), End: at(110), Limit: 5},
		{Task: "t", Start: at(200), End: at(210), Limit: 1},
	}
	for _, c := range []struct {
		ms, want int
	}{{0, 1}, {99, 1}, {100, 5}, {105, 5}, {110, 5}, {111, 5}, {199, 5}, {205, 5}, {210, 5}, {211, 1}} {
		if got := LimitFor(1, cs, at(c.ms)); got != c.want {
			t.Errorf("LimitFor(at %d ms) = %d, want %d", c.ms, got, c.want)
		}
	}
}

// A holder whose first check found its context cancelled (its process paused between the grant
// and StartExecution's return) held nothing: it is no holder, but its Complete must still fail.
func TestIdleHolder(t *testing.T) {
	h := cleanHistory()
	h.Holds[3].StopAt = time.Time{}
	r := Check(h)
	if len(r.Violations) > 0 || r.Idle["t"] != 1 {
		t.Fatalf("idle holder: violations %v, idle %d", r.Violations, r.Idle["t"])
	}
	h.Holds[3].Result = ledger.ResultOK
	if r := Check(h); len(r.Violations) != 1 || r.Violations[0].Check != "e" {
		t.Fatalf("idle holder whose Complete succeeded after a reclaim: %v", r.Violations)
	}
}

// requireViolation fails the test unless r has a violation of check whose message contains want.
func requireViolation(t *testing.T, r Report, check, want string) {
	t.Helper()
	for _, v := range r.Violations {
		if v.Check == check && strings.Contains(v.Msg, want) {
			return
		}
	}
	t.Fatalf("want a (%s) violation containing %q; got %v", check, want, r.Violations)
}

// A waiter whose slot was granted to its ticket just before its host was cut off, and taken
// after the outage, works by a heartbeat sent after it: rule (f) does not bound it by the outage's
// start. A holder whose start returned before the outage still is.
func TestAWaiterThatTookItsSlotAfterAnOutageMayWork(t *testing.T) {
	fOf := func(h History) []Violation {
		var out []Violation
		for _, v := range Check(h).Violations {
			if v.Check == "f" {
				out = append(out, v)
			}
		}
		return out
	}
	h := cleanHistory()
	h.Grants = append(h.Grants, Grant{Exec: 9, Task: "u", Host: "w3", Fence: 1, GrantedAt: at(3050), LastKeepAlive: at(6100), Threshold: threshold, CompletedAt: at(6300)})
	h.Holds = append(h.Holds, Hold{Exec: 9, Task: "u", Host: "w3", Fence: 1, Waited: true, ReturnedAt: at(6100), StopAt: at(6200),
		Reason: ledger.ReasonCompleted, Result: ledger.ResultOK})
	if v := fOf(h); len(v) > 0 {
		t.Fatalf("a waiter that took its slot after the outage: %v", v)
	}
	h.Holds[len(h.Holds)-1].ReturnedAt = at(3060) // it returned before the outage: its lease ran out in it
	if v := fOf(h); len(v) != 1 || v[0].Exec != 9 {
		t.Fatalf("want one (f) violation for exec 9, got %v", v)
	}
}

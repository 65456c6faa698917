package checker

import (
	"strings"
	"testing"
	"time"
)

// ratedGrant is a grant of task "r" at ms (completed 10 ms later); fences are given in time order
// by ratedHistory.
func ratedGrant(exec int64, key string, cost, ms int) Grant {
	return Grant{Exec: exec, Task: "r", Host: "w1", Key: key, Cost: cost, GrantedAt: at(ms), CompletedAt: at(ms + 10),
		LastKeepAlive: at(ms), Threshold: threshold}
}

// ratedHistory is task "r" under a rate of 10/1s burst 2 (11 units a window); keys "a" and "b" have
// 2/1s burst 2 (3 a window), "hot" 4/1s burst 1 (4 a window), the others none. Its grants fill the
// task's windows [0, 1000) and [2000, 3000) exactly, and each key's.
func ratedHistory() History {
	grants := []Grant{
		ratedGrant(1, "hot", 2, 0), ratedGrant(2, "hot", 2, 100), ratedGrant(3, "a", 2, 200), ratedGrant(4, "a", 1, 300),
		ratedGrant(5, "free", 4, 999),
		ratedGrant(6, "hot", 4, 2000), ratedGrant(7, "b", 3, 2001), ratedGrant(8, "free", 4, 2500),
		ratedGrant(9, "a", 3, 3300), // a's window [2300, 3300) is empty: 3 fit again
	}
	for i := range grants {
		grants[i].Fence = int64(i + 1)
	}
	key := Rate{Count: 2, Per: time.Second, Burst: 2}
	return History{
		Grants: grants,
		Rates: map[string]Rates{"r": {
			Task:  Rate{Count: 10, Per: time.Second, Burst: 2},
			Named: map[string]Rate{"hot": {Count: 4, Per: time.Second}, "a": key, "b": key},
		}},
		Kills: map[string]time.Time{},
	}
}

// rateViolations are the (r) violations of h.
func rateViolations(h History) []Violation {
	var out []Violation
	for _, v := range Check(h).Violations {
		if v.Check == "r" {
			out = append(out, v)
		}
	}
	return out
}

func TestRatedHistoryPasses(t *testing.T) {
	h := ratedHistory()
	r := Check(h)
	if len(r.Violations) > 0 {
		t.Fatalf("violations on a clean rated history: %v", r.Violations)
	}
	if got := r.TaskRateUnits["r"]; got != (RateFigure{Units: 11, Bound: 11, Grants: 9}) {
		t.Fatalf("task's busiest window %+v", got)
	}
	want := map[string]RateFigure{"hot": {4, 4, 3}, "a": {3, 3, 3}, "b": {3, 3, 1}}
	for k, f := range want {
		if got := r.KeyRateUnits["r"][k]; got != f {
			t.Fatalf("key %q's busiest window %+v, want %+v", k, got, f)
		}
	}
	if _, judged := r.KeyRateUnits["r"]["free"]; judged {
		t.Fatal(`key "free" has no rate; it was judged`)
	}
}

// TestRateRulesCatch breaks the rated history in one way per case and expects check (r) to say so,
// naming the window and its grants.
func TestRateRulesCatch(t *testing.T) {
	cases := []struct {
		name string
		want []string
		edit func(h *History)
	}{
		{"the task's window one unit over (a cost)", []string{"the task's rate 10/1s burst 2: the grants of [05:00:00.000000, 05:00:01.000000) cost 12, over Count + Burst − 1 = 11",
			`exec 5 cost 5 key "free"`}, func(h *History) { h.Grants[4].Cost = 5 }},
		{"the task's window over (a grant moved into it)", []string{"the task's rate", "[05:00:00.000000, 05:00:01.000000) cost 14"},
			func(h *History) { h.Grants[6].GrantedAt = at(999) }}, // "b" 3 at 999 instead of 2001
		{"a window that begins at a later grant", []string{"the task's rate", "[05:00:00.100000, 05:00:01.100000) cost 13"},
			func(h *History) { h.Grants[5].GrantedAt = at(1050) }}, // [0, 1000) fits, [100, 1100) does not
		{"a grant later reclaimed counts", []string{"the task's rate", "[05:00:02.000000, 05:00:03.000000) cost 12"}, func(h *History) {
			h.Grants = append(h.Grants, Grant{Exec: 10, Task: "r", Host: "w2", Fence: 10, Cost: 1, GrantedAt: at(2700), ReclaimedAt: at(5000),
				LastKeepAlive: at(2700), Threshold: threshold})
		}},
		{"a key's window over", []string{`key "a"'s rate 2/1s burst 2`, "cost 4, over Count + Burst − 1 = 3",
			`exec 4 cost 2 key "a"`}, func(h *History) { h.Grants[3].Cost = 2 }},
		{"a named key's own rate", []string{`key "hot"'s rate 3/1s burst 1`, "cost 4, over Count + Burst − 1 = 3"},
			func(h *History) { h.Rates["r"].Named["hot"] = Rate{Count: 3, Per: time.Second, Burst: 1} }},
		{"the empty key under the keys' rate", []string{`key ""'s rate 2/1s burst 2`, "cost 4"}, func(h *History) {
			rs := h.Rates["r"]
			rs.Key = Rate{Count: 2, Per: time.Second, Burst: 2}
			h.Rates["r"] = rs
			h.Grants = append(h.Grants, ratedGrant(10, "", 2, 3500), ratedGrant(11, "", 2, 4499))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := ratedHistory()
			c.edit(&h)
			vs := rateViolations(h)
			for _, v := range vs {
				if all(v.Msg, c.want) {
					return
				}
			}
			t.Fatalf("want an (r) violation containing %q; got %v", c.want, vs)
		})
	}
}

func all(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Windows are half-open: grants Per apart are in different windows. A window over its bound is
// reported once, not once per grant in it.
func TestRateWindowsAreHalfOpenAndReportedOnce(t *testing.T) {
	h := History{Rates: map[string]Rates{"r": {Task: Rate{Count: 2, Per: time.Second}}}, Kills: map[string]time.Time{}}
	for i := range 6 {
		h.Grants = append(h.Grants, ratedGrant(int64(i+1), "", 1, 500*i)) // 2 a window, to the µs
		h.Grants[i].Fence = int64(i + 1)
	}
	if vs := rateViolations(h); len(vs) > 0 {
		t.Fatalf("grants exactly Per/Count apart: %v", vs)
	}
	for i := range h.Grants {
		h.Grants[i].GrantedAt = h.Grants[i].GrantedAt.Add(-time.Duration(i) * time.Microsecond) // each 1 µs early
	}
	vs := rateViolations(h)
	if len(vs) != 2 || vs[0].Exec != 3 || vs[1].Exec != 6 {
		t.Fatalf("want one violation for [0, 1000) (exec 3 goes over) and one for [1500, 2500) (exec 6); got %v", vs)
	}
}

// ReclaimLatencies measures a kill's reclaim only when no rate lacked room from the moment the
// slot became reclaimable (last heartbeat + threshold: 12 s here) to the reclaim (12.3 s).
func TestReclaimLatenciesLeaveOutSlotsARateHeldBack(t *testing.T) {
	killed := func(exec int64, key string, granted int) Grant {
		g := ratedGrant(exec, key, 1, granted)
		g.Host, g.CompletedAt, g.ReclaimedAt, g.LastKeepAlive = "w2", time.Time{}, at(12_300), at(10_000)
		return g
	}
	h := History{
		// The task's: a unit every 100 ms, 2 at once; "hot"'s: one unit in 10 s.
		Rates: map[string]Rates{"r": {Task: Rate{Count: 10, Per: time.Second, Burst: 2}, Named: map[string]Rate{"hot": {Count: 1, Per: 10 * time.Second}}}},
		Grants: []Grant{
			killed(1, "a", 9_000), killed(2, "hot", 9_500),
			killed(3, "b", 11_000), // granted after the kill: not the killed process's slot
		},
	}
	sig := map[string]time.Time{"w2": at(10_100)}
	want := func(f ReclaimFigures, measured, byTask, byKey int) {
		t.Helper()
		if len(f.Latencies) != measured || f.HeldByTaskRate != byTask || f.HeldByKeyRate != byKey {
			t.Fatalf("got %+v; want %d measured, %d held back by the task's rate, %d by a key's", f, measured, byTask, byKey)
		}
	}
	// "hot" took its unit at 9.5 s: its rate has room again at 19.5 s.
	f := ReclaimLatencies(h, "r", sig)
	want(f, 1, 0, 1)
	if f.Latencies[0] != 2200*time.Millisecond {
		t.Fatalf("latency %s, want 2.2s (10.1 s → 12.3 s)", f.Latencies[0])
	}
	// 2 units at 12.1 s leave the task's tat at 12.3 s, above 12.1 + 0.1: no room between.
	h.Grants = append(h.Grants, ratedGrant(4, "c", 2, 12_100))
	want(ReclaimLatencies(h, "r", sig), 0, 2, 0)
	// At 11.95 s instead: no room at 12 s, when the slots became reclaimable (tat 12.15 s), though a
	// unit granted at 12.25 s found room.
	h.Grants[3].GrantedAt = at(11_950)
	h.Grants = append(h.Grants, ratedGrant(5, "d", 1, 12_250))
	want(ReclaimLatencies(h, "r", sig), 0, 2, 0)
	// At 11.5 s: the task's rate has room again from 11.6 s, before 12 s.
	h.Grants[3].GrantedAt = at(11_500)
	want(ReclaimLatencies(h, "r", sig), 1, 0, 1)
	// Without rates, every reclaim is measured.
	h.Rates = nil
	want(ReclaimLatencies(h, "r", sig), 2, 0, 0)
}

package taskling

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskling-go/taskling/internal/cronspec"
)

// TestPlanCatchUpTable is the catch-up table: policy × outage length → what runs, what is skipped
// and what expires. The spec fires every 10 s; the cursor is the last instant run (T0); the
// scheduler comes back at now = T0 + outage; misfire threshold 5 s, catch-up window 30 s where set.
func TestPlanCatchUpTable(t *testing.T) {
	s, err := cronspec.Parse("*/10 * * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	outages := []struct {
		name string
		back time.Duration // now - T0
	}{
		{"shorter than a period", 6 * time.Second},
		{"back on time for the next instant", 12 * time.Second},
		{"1 period", 16 * time.Second},
		{"3 periods", 36 * time.Second},
		{"longer than the window", 56 * time.Second},
	}
	policies := []struct {
		name string
		p    catchUpPolicy
		want []string // per outage: "run …; skipped …; expired …"
	}{
		{"RunLatest", catchUpPolicy{CatchUp: CatchUpRunLatest, MaxCatchUp: 100, Misfire: 5 * time.Second}, []string{
			"run -; skipped -; expired -",
			"run +10; skipped -; expired -",
			"run +10(late); skipped -; expired -",
			"run +30(late); skipped +10..+20 (2); expired -",
			"run +50(late); skipped +10..+40 (4); expired -",
		}},
		{"RunLatest, window 30s", catchUpPolicy{CatchUp: CatchUpRunLatest, MaxCatchUp: 100, Misfire: 5 * time.Second, Window: 30 * time.Second}, []string{
			"run -; skipped -; expired -",
			"run +10; skipped -; expired -",
			"run +10(late); skipped -; expired -",
			"run +30(late); skipped +10..+20 (2); expired -",
			"run +50(late); skipped +30..+40 (2); expired +10..+20 (2)",
		}},
		{"RunAll", catchUpPolicy{CatchUp: CatchUpRunAll, MaxCatchUp: 100, Misfire: 5 * time.Second}, []string{
			"run -; skipped -; expired -",
			"run +10; skipped -; expired -",
			"run +10(late); skipped -; expired -",
			"run +10(late) +20(late) +30(late); skipped -; expired -",
			"run +10(late) +20(late) +30(late) +40(late) +50(late); skipped -; expired -",
		}},
		{"RunAll, window 30s", catchUpPolicy{CatchUp: CatchUpRunAll, MaxCatchUp: 100, Misfire: 5 * time.Second, Window: 30 * time.Second}, []string{
			"run -; skipped -; expired -",
			"run +10; skipped -; expired -",
			"run +10(late); skipped -; expired -",
			"run +10(late) +20(late) +30(late); skipped -; expired -",
			"run +30(late) +40(late) +50(late); skipped -; expired +10..+20 (2)",
		}},
		{"RunAll, MaxCatchUp 2", catchUpPolicy{CatchUp: CatchUpRunAll, MaxCatchUp: 2, Misfire: 5 * time.Second}, []string{
			"run -; skipped -; expired -",
			"run +10; skipped -; expired -",
			"run +10(late); skipped -; expired -",
			"run +20(late) +30(late); skipped +10..+10 (1); expired -",
			"run +40(late) +50(late); skipped +10..+30 (3); expired -",
		}},
		{"Skip", catchUpPolicy{CatchUp: CatchUpSkip, MaxCatchUp: 100, Misfire: 5 * time.Second}, []string{
			"run -; skipped -; expired -",
			"run +10; skipped -; expired -",
			"run -; skipped +10..+10 (1); expired -",
			"run -; skipped +10..+30 (3); expired -",
			"run -; skipped +10..+50 (5); expired -",
		}},
		{"Skip, window 30s", catchUpPolicy{CatchUp: CatchUpSkip, MaxCatchUp: 100, Misfire: 5 * time.Second, Window: 30 * time.Second}, []string{
			"run -; skipped -; expired -",
			"run +10; skipped -; expired -",
			"run -; skipped +10..+10 (1); expired -",
			"run -; skipped +10..+30 (3); expired -",
			"run -; skipped +30..+50 (3); expired +10..+20 (2)",
		}},
	}
	for _, pol := range policies {
		for i, o := range outages {
			t.Run(pol.name+"/"+o.name, func(t *testing.T) {
				now := t0.Add(o.back)
				plan := planCatchUp(s, t0, now, pol.p)
				if got := describePlan(plan, t0); got != pol.want[i] {
					t.Errorf("got  %s\nwant %s", got, pol.want[i])
				}
				checkPlanInvariants(t, s, t0, now, plan)
			})
		}
	}
}

// TestPlanCatchUpInvariants checks, over many cursors, nows, specs and policies, that every
// due instant is decided exactly once (run, skipped or expired), that the cursor moves to the
// last due instant, and that the plan depends on nothing but its inputs.
func TestPlanCatchUpInvariants(t *testing.T) {
	specs := []string{"*/10 * * * * *", "* * * * * *", "0 */5 * * * *", "@every 7s", "30 1 * * *"}
	zones := []string{"UTC", "America/New_York", "Australia/Lord_Howe"}
	base := time.Date(2026, 11, 1, 5, 20, 0, 0, time.UTC) // in New York's fall-back hour
	for _, spec := range specs {
		for _, zone := range zones {
			s, err := cronspec.Parse(spec, zone)
			if err != nil {
				t.Fatal(err)
			}
			for _, cp := range []CatchUpPolicy{CatchUpRunLatest, CatchUpRunAll, CatchUpSkip} {
				for _, window := range []time.Duration{0, 25 * time.Second} {
					for _, maxCU := range []int{2, 100} {
						p := catchUpPolicy{CatchUp: cp, Window: window, MaxCatchUp: maxCU, Misfire: 5 * time.Second}
						for back := time.Duration(0); back < 50*time.Minute; back += 37*time.Second + 4*time.Minute {
							cursor := base.Add(back / 3)
							now := cursor.Add(back)
							plan := planCatchUp(s, cursor, now, p)
							checkPlanInvariants(t, s, cursor, now, plan)
							if again := planCatchUp(s, cursor, now, p); describePlan(again, cursor) != describePlan(plan, cursor) {
								t.Fatalf("not deterministic")
							}
							if cp == CatchUpRunLatest && len(plan.Run) > 1 {
								t.Fatalf("RunLatest ran %d instants", len(plan.Run))
							}
							if cp == CatchUpRunAll && len(plan.Run) > maxCU {
								t.Fatalf("RunAll ran %d > MaxCatchUp %d", len(plan.Run), maxCU)
							}
						}
					}
				}
			}
		}
	}
}

func checkPlanInvariants(t *testing.T, s *cronspec.Schedule, cursor, now time.Time, plan catchUpPlan) {
	t.Helper()
	var due []time.Time
	for x := s.Next(cursor); !x.IsZero() && !x.After(now); x = s.Next(x) {
		due = append(due, x)
	}
	decided := int64(len(plan.Run)) + plan.Skipped.N + plan.Expired.N
	if decided != int64(len(due)) {
		t.Fatalf("%d due, %d decided (%d run, %d skipped, %d expired)", len(due), decided, len(plan.Run), plan.Skipped.N, plan.Expired.N)
	}
	if len(due) == 0 {
		if !plan.Decided.IsZero() {
			t.Fatalf("nothing due but Decided = %s", plan.Decided)
		}
		return
	}
	if !plan.Decided.Equal(due[len(due)-1]) {
		t.Fatalf("Decided %s; want the last due instant %s", plan.Decided, due[len(due)-1])
	}
	// Ranges and runs partition the due instants in order: expired, skipped, runs.
	i := 0
	take := func(r instantRange, what string) {
		if r.N == 0 {
			return
		}
		if !r.First.Equal(due[i]) || !r.Last.Equal(due[i+int(r.N)-1]) {
			t.Fatalf("%s range %s..%s (%d) is not due[%d:%d]", what, r.First, r.Last, r.N, i, i+int(r.N))
		}
		i += int(r.N)
	}
	take(plan.Expired, "expired")
	take(plan.Skipped, "skipped")
	for k, r := range plan.Run {
		if !r.Equal(due[i+k]) {
			t.Fatalf("run %d is %s; want %s", k, r, due[i+k])
		}
	}
	if next := s.Next(now); !plan.Next.Equal(next) {
		t.Fatalf("Next %s; want %s", plan.Next, next)
	}
}

func describePlan(p catchUpPlan, t0 time.Time) string {
	off := func(x time.Time) string { return fmt.Sprintf("+%d", int(x.Sub(t0)/time.Second)) }
	rng := func(r instantRange) string {
		if r.N == 0 {
			return "-"
		}
		return fmt.Sprintf("%s..%s (%d)", off(r.First), off(r.Last), r.N)
	}
	var runs []string
	for i, r := range p.Run {
		s := off(r)
		if p.Late[i] {
			s += "(late)"
		}
		runs = append(runs, s)
	}
	if len(runs) == 0 {
		runs = []string{"-"}
	}
	return fmt.Sprintf("run %s; skipped %s; expired %s", strings.Join(runs, " "), rng(p.Skipped), rng(p.Expired))
}

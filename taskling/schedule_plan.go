package taskling

import (
	"time"

	"github.com/taskling-go/taskling/internal/cronspec"
)

// catchUpPlan is what the scheduler does with the instants that came due since its cursor. It
// is computed by planCatchUp, a pure function of (spec, zone, cursor, DB now, policy): every
// host that reads the same schedule row at the same DB time decides the same thing, and the
// README's outage table is this function's table.
type catchUpPlan struct {
	// Run are the instants to run, oldest first; Late[i] tells whether Run[i] was missed (older
	// than the misfire threshold) rather than on time.
	Run  []time.Time
	Late []bool
	// Skipped are instants not run by the catch-up policy: the older missed ones under
	// RunLatest, every missed one under Skip, those beyond MaxCatchUp under RunAll.
	Skipped instantRange
	// Expired are missed instants older than CatchUpWindow: never run.
	Expired instantRange
	// Decided is the latest instant decided (run, skipped or expired): the new cursor. Zero if
	// nothing came due.
	Decided time.Time
	// Next is the first instant after now (zero if the spec never fires again).
	Next time.Time
}

// instantRange is a run of consecutive instants of a schedule.
type instantRange struct {
	First, Last time.Time
	N           int64
}

func (r *instantRange) add(t time.Time) {
	if r.N == 0 {
		r.First = t
	}
	r.Last = t
	r.N++
}

// catchUpPolicy is the part of a schedule's options that planCatchUp needs.
type catchUpPolicy struct {
	CatchUp    CatchUpPolicy
	Window     time.Duration // 0: no window
	MaxCatchUp int
	Misfire    time.Duration
}

// maxDueInstants bounds the instants one plan enumerates; a longer backlog (a per-second spec
// down for weeks) is decided in several plans, oldest first, each recording what it skipped.
const maxDueInstants = 1_000_000

// planCatchUp decides the instants in (cursor, now]:
//
//   - An instant at most the misfire threshold old is on time: it runs, whatever the policy.
//     The threshold is MisfireThreshold, capped at half the gap to the instant's successor.
//   - An older instant was missed. If it is older than CatchUpWindow (when set) it expired and
//     never runs. Otherwise the catch-up policy decides: RunLatest runs only the latest due
//     instant; RunAll runs the latest MaxCatchUp of them, oldest first; Skip runs none.
//   - Everything not run is reported as Skipped or Expired, to be recorded.
func planCatchUp(s *cronspec.Schedule, cursor, now time.Time, p catchUpPolicy) catchUpPlan {
	var plan catchUpPlan
	var due []time.Time
	t := s.Next(cursor)
	for !t.IsZero() && !t.After(now) && len(due) < maxDueInstants {
		due = append(due, t)
		t = s.Next(t)
	}
	if len(due) < maxDueInstants {
		plan.Next = t
	} else {
		plan.Next = now // more came due: decide them next
	}
	if len(due) == 0 {
		return plan
	}
	plan.Decided = due[len(due)-1]

	// On-time instants are the newest: with the threshold capped at half the gap to the
	// successor, only the last due instant can be on time.
	onTime := 0
	for i := len(due) - 1; i >= 0; i-- {
		next := plan.Next
		if i+1 < len(due) {
			next = due[i+1]
		}
		threshold := p.Misfire
		if !next.IsZero() && next.After(due[i]) {
			threshold = min(threshold, next.Sub(due[i])/2)
		}
		if now.Sub(due[i]) > threshold {
			break
		}
		onTime++
	}
	var candidates []int // missed and not expired, oldest first
	for i, t := range due[:len(due)-onTime] {
		if p.Window > 0 && now.Sub(t) > p.Window {
			plan.Expired.add(t)
			continue
		}
		candidates = append(candidates, i)
	}
	runFrom := len(due) - onTime // on-time instants are the newest
	var runLate []int
	switch p.CatchUp {
	case CatchUpRunAll:
		keep := max(p.MaxCatchUp-onTime, 0)
		if len(candidates) > keep {
			for _, i := range candidates[:len(candidates)-keep] {
				plan.Skipped.add(due[i])
			}
			candidates = candidates[len(candidates)-keep:]
		}
		runLate = candidates
	case CatchUpSkip:
		for _, i := range candidates {
			plan.Skipped.add(due[i])
		}
	default: // CatchUpRunLatest
		if onTime > 0 {
			for _, i := range candidates {
				plan.Skipped.add(due[i])
			}
		} else if len(candidates) > 0 {
			for _, i := range candidates[:len(candidates)-1] {
				plan.Skipped.add(due[i])
			}
			runLate = candidates[len(candidates)-1:]
		}
	}
	for _, i := range runLate {
		plan.Run = append(plan.Run, due[i])
		plan.Late = append(plan.Late, true)
	}
	for _, t := range due[runFrom:] {
		plan.Run = append(plan.Run, t)
		plan.Late = append(plan.Late, false)
	}
	return plan
}

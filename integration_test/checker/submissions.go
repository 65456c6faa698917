package checker

import (
	"sort"
	"time"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// Check (s): submissions run by Work.
//
// The database says, per submission, its status, its attempt count and which execution ran each
// attempt (submission_attempt); the executions' ends say how each attempt ended. The ledgers say
// which execution each worker ran for which submission and attempt, when it held its slot, and
// what its Complete returned. The promises checked:
//
//	(s1) every submission completed (none waiting, running, dead or cancelled at the end);
//	(s2) its attempts are numbered 1…n with n its attempt count, each run by a granted execution;
//	(s3) exactly one attempt completed, the last one, and the submission names it: none ran
//	     after it, and it is completed exactly once in the database;
//	(s4) attempt k+1 was granted only after attempt k's execution had ended in the database;
//	(s5) the ledgers record at most one successful completion per submission, of that execution,
//	     and every worker ran the submission and attempt the database links to its execution;
//	(s6) no two holders of one submission held at once: the intervals [grant, stop] of its
//	     attempts (a killed holder's ends at its kill, a holder that lost its lease at its last
//	     unit of work) do not overlap.
//
// A failover may lose what an attempt wrote (check h): an attempt whose grant was lost is left
// out (the new primary never ran it; check h holds that its holder stopped before the task was
// granted again), and a completion that was lost does not count in (s5): the submission ran
// again, at least once as the README promises for that case.

// SubmissionState is a submission as the database holds it at the end of the run.
type SubmissionState struct {
	ID          int64
	Task        string
	Status      string // "waiting", "in_progress", "completed", "dead", "cancelled"
	Attempts    int
	MaxAttempts int
	ExecutionID int64 // of the current or last attempt
	Runs        []AttemptRun
}

// AttemptRun is one row of submission_attempt.
type AttemptRun struct {
	Attempt int
	Exec    int64
}

// checkSubmissions is check (s).
func (c *checkRun) checkSubmissions() {
	r := &c.r
	if len(c.h.Submissions) == 0 {
		return
	}
	type key struct {
		sub     int64
		attempt int
	}
	attemptOf := map[int64]key{} // execution → its submission attempt in the database
	for _, s := range c.h.Submissions {
		for _, a := range s.Runs {
			if prev, dup := attemptOf[a.Exec]; dup {
				r.add("s", s.Task, a.Exec, "execution runs attempt %d of submission %d and attempt %d of submission %d", prev.attempt, prev.sub, a.Attempt, s.ID)
			}
			attemptOf[a.Exec] = key{s.ID, a.Attempt}
		}
	}
	holdsOf := map[int64][]*Hold{}
	for i := range c.h.Holds {
		hd := &c.h.Holds[i]
		if hd.Submission == 0 {
			continue
		}
		if g, ok := c.grants[hd.Exec]; ok && g.Lost {
			r.SubmissionAttemptsLost++
			continue
		}
		k, ok := attemptOf[hd.Exec]
		switch {
		case !ok:
			r.add("s", hd.Task, hd.Exec, "the worker on %s ran submission %d attempt %d under an execution the database links to no attempt",
				hd.Host, hd.Submission, hd.Attempt)
		case k.sub != hd.Submission || k.attempt != hd.Attempt:
			r.add("s", hd.Task, hd.Exec, "the worker on %s ran submission %d attempt %d; the database links the execution to submission %d attempt %d",
				hd.Host, hd.Submission, hd.Attempt, k.sub, k.attempt)
		}
		holdsOf[hd.Submission] = append(holdsOf[hd.Submission], hd)
	}
	for _, s := range c.h.Submissions {
		c.checkSubmission(s, holdsOf[s.ID])
	}
}

func (c *checkRun) checkSubmission(s SubmissionState, holds []*Hold) {
	r := &c.r
	// (s1)
	if s.Status != "completed" {
		r.add("s", s.Task, s.ExecutionID, "submission %d is %s after %d of %d attempts", s.ID, s.Status, s.Attempts, s.MaxAttempts)
	}
	// (s2)
	runs := append([]AttemptRun(nil), s.Runs...)
	sort.Slice(runs, func(i, j int) bool { return runs[i].Attempt < runs[j].Attempt })
	for i, a := range runs {
		if a.Attempt != i+1 {
			r.add("s", s.Task, a.Exec, "submission %d: attempts numbered %v, not 1…%d", s.ID, attemptNumbers(runs), len(runs))
			break
		}
	}
	if len(runs) != s.Attempts {
		r.add("s", s.Task, s.ExecutionID, "submission %d counts %d attempts but %d were run", s.ID, s.Attempts, len(runs))
	}
	// (s3), (s4)
	completed := 0
	var prevEnd time.Time
	var prevExec int64
	for i, a := range runs {
		g, ok := c.grants[a.Exec]
		if !ok {
			r.add("s", s.Task, a.Exec, "submission %d attempt %d ran under an execution that was never granted a slot", s.ID, a.Attempt)
			prevEnd, prevExec = time.Time{}, 0
			continue
		}
		if completed > 0 {
			r.add("s", s.Task, a.Exec, "submission %d attempt %d ran after the submission had completed", s.ID, a.Attempt)
		}
		if !g.CompletedAt.IsZero() && !g.Failed && g.ReclaimedAt.IsZero() {
			completed++
			if i != len(runs)-1 {
				r.add("s", s.Task, a.Exec, "submission %d attempt %d completed but is not its last attempt (%d)", s.ID, a.Attempt, len(runs))
			}
			if s.ExecutionID != a.Exec {
				r.add("s", s.Task, a.Exec, "submission %d completed under execution %d but names execution %d", s.ID, a.Exec, s.ExecutionID)
			}
		}
		if prevExec != 0 && (prevEnd.IsZero() || g.GrantedAt.Before(prevEnd)) {
			r.add("s", s.Task, a.Exec, "submission %d attempt %d granted at %s, before attempt %d (execution %d) ended (%s)",
				s.ID, a.Attempt, ts(g.GrantedAt), a.Attempt-1, prevExec, tsOrNever(prevEnd))
		}
		prevExec, prevEnd = a.Exec, g.CompletedAt
		if prevEnd.IsZero() || (!g.ReclaimedAt.IsZero() && g.ReclaimedAt.Before(prevEnd)) {
			prevEnd = g.ReclaimedAt
		}
	}
	if completed > 1 {
		r.add("s", s.Task, s.ExecutionID, "submission %d completed %d times in the database", s.ID, completed)
	}
	if s.Status == "completed" && completed == 0 {
		r.add("s", s.Task, s.ExecutionID, "submission %d is completed but none of its attempts' executions completed", s.ID)
	}
	// (s5)
	oks := 0
	for _, hd := range holds {
		if hd.Result != ledger.ResultOK {
			continue
		}
		if g, ok := c.grants[hd.Exec]; ok && !g.LostCompletion.IsZero() {
			r.SubmissionCompletionsLost++
			continue
		}
		oks++
		if hd.Exec != s.ExecutionID || s.Status != "completed" {
			r.add("s", s.Task, hd.Exec, "the ledger on %s completed submission %d (attempt %d) under this execution, the database under execution %d (%s)",
				hd.Host, s.ID, hd.Attempt, s.ExecutionID, s.Status)
		}
	}
	if oks > 1 {
		r.add("s", s.Task, s.ExecutionID, "the ledgers record %d successful completions of submission %d", oks, s.ID)
	}
	// (s6)
	type span struct {
		hd         *Hold
		start, end time.Time
	}
	var spans []span
	for _, hd := range holds {
		g, ok := c.grants[hd.Exec]
		if !ok {
			continue // reported by (c)
		}
		end, ok := holdEnd(hd, c.h.Kills)
		if !ok {
			continue // reported by (c)
		}
		if end.IsZero() {
			end = g.GrantedAt // never worked
		}
		spans = append(spans, span{hd, g.GrantedAt, end})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		n := spans[i]
		for _, p := range spans[:i] {
			if n.start.Before(p.end) {
				r.add("s", s.Task, n.hd.Exec, "submission %d: attempt %d on %s held from %s while attempt %d (execution %d on %s) held until %s",
					s.ID, n.hd.Attempt, n.hd.Host, ts(n.start), p.hd.Attempt, p.hd.Exec, p.hd.Host, ts(p.end))
				break
			}
		}
	}
}

func attemptNumbers(runs []AttemptRun) []int {
	out := make([]int, len(runs))
	for i, a := range runs {
		out[i] = a.Attempt
	}
	return out
}

func tsOrNever(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return ts(t)
}

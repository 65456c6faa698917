// Package checker judges a chaos run: it reads what the database recorded (every grant, with
// its fence, start, completion and reclaim times on the DB clock, and each task's token list)
// and what the workers recorded in their ledgers (when each holder started and stopped working,
// and why), and reports every way in which the two break taskling's promises.
//
// # The contract checked
//
// A holder is an execution returned by StartExecution. It holds its slot from its grant (the
// execution's started_at, written inside the acquire transaction under the task row's lock, so
// no later than StartExecution's return) until it stops working: the instant it calls Complete,
// or the last instant at which it observed Execution.Context() not cancelled (workers check
// ctx.Err() before every unit of work), or the instant its process was killed. The checks:
//
//	(a) overlap: at no instant do the holders of a task hold more than the limit in force (rule
//	    below): their costs add up to at most it (a holder without a cost costs 1);
//	(b) fencing: ordered by grant time, a task's fences strictly increase, and every holder saw
//	    the fence the database recorded;
//	(c) no leak: every grant ends released (completed) or reclaimed, a reclaimed execution was
//	    dead by the database's rule when it was reclaimed (DB clock − last heartbeat > threshold),
//	    a Complete that succeeded was not of a reclaimed execution, and every holder ended;
//	(d) tokens: the task row's token list names exactly the executions that neither completed nor
//	    were reclaimed; after the final sweep every token is available and there are as many as
//	    the limit; the row's fence equals the number of grants;
//	(e) reclaim: a holder whose execution was reclaimed had stopped working before the reclaim,
//	    and its Complete failed the identity check (ErrLeaseLost);
//	(f) self-cancellation: a holder cut off from the database for longer than its lease (a long
//	    SIGSTOP, a partition) stopped working within its lease (threshold − safety margin) of the
//	    cut; a holder paused for less than its lease minus one heartbeat interval was neither
//	    cancelled nor reclaimed for it.
//	(g) queue order: waiters for a slot are granted in the order of the task's queue, across
//	    processes (higher priority first, then order of queueing), within the tolerance the
//	    design allows; see checkQueues;
//	(p) costs and keys: at every grant, the costs of the task's executions the database had
//	    granted and not yet ended add up to at most the limit that grant saw, and those of each
//	    key to at most that key's limit; a holder's key and cost in its ledger are the
//	    database's; see checkKeys.
//	(r) rates: for the task's rate and each key's, in every half-open window of length Per of
//	    the database's grant times, the grants' costs add up to at most Count + Burst − 1 (a
//	    grant later reclaimed counts); see checkRates.
//	(s) submissions: every submission completed, exactly once in the database and at most once
//	    in the ledgers, and no two of its attempts held a slot at once; see checkSubmissions.
//	(k) blocks: the blocks of a numeric range cover it exactly once, each completed by exactly
//	    one attempt, no two attempts of a block live at once, within the retry limit, and every
//	    attempt that died or failed taken again; see checkBlocks.
//	(m) critical sections: each section grant belongs to an execution that asked for it, a wait
//	    times out on time and does not hold the line, and a killed holder's section is taken
//	    again promptly; see checkSection (checks a–g apply to the section's hidden task too).
//	(h) failover: a grant lost when the primary died (the new primary never had it) was held by
//	    a holder that stopped before the new primary granted its task again, and that grant came
//	    only once the lost holder was dead by the database's rule; see checkFailover. Lost grants
//	    count in (a) and, when a holder saw them, in (b): a fence seen before a switch is never
//	    handed out again after it. On a switch whose new timeline is known, the epoch rule: no
//	    grant for one threshold after the new primary became writable, fences above the
//	    timeline's base. Under synchronous replication (NoLoss) nothing a holder saw is lost.
//
// # The limit in force
//
// An operator override is recorded with a window [Start, End] on the DB clock that contains its
// commit (Start is read before the UPDATE is sent, End after it returned). The override takes the
// task row's lock, as every acquire transaction does, so a grant whose started_at is before Start
// saw the old limit, one after End the new limit, and one inside the window either: it is allowed
// the larger of the two. Lowering a limit never evicts a live holder (its token retires), so the
// bound at an instant t is the limit seen by the latest grant among the holders at t: all of them
// held already when that grant was made, and the grant was made only if they fit. Counting rises
// only at grants, so checking each grant against the limit it saw checks every instant.
package checker

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/taskling-go/taskling/tokens"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// Grant is an execution the database granted a slot (task_execution with a token), at the end
// of the run.
type Grant struct {
	Exec          int64
	Task          string
	Host          string
	Fence         int64
	GrantedAt     time.Time // started_at
	CompletedAt   time.Time // zero if not completed
	ReclaimedAt   time.Time // zero if not reclaimed
	LastKeepAlive time.Time
	Threshold     time.Duration
	// Failed: the completion recorded a failure (outcome failed); CompletedAt is set.
	Failed bool
	// Session is the grantee's session (its process's); Priority the priority it waited at (the
	// Priority of its start, or its submission's). Used by check (g).
	Session  int64
	Priority int
	// Key and Cost are the execution's (task_execution key and cost; Cost 0 counts as 1).
	Key  string
	Cost int
	// Lost: committed on a primary that died, and missing from the primary that took over (an
	// asynchronous standby had not received it). It never ends in the database: its slot ceased
	// to exist at the switch (check h). See MergeTimelines.
	Lost bool
	// LostCompletion is when a primary that died recorded the grant's completion, which the
	// primary that took over never had (zero: none). The holder's Complete succeeded then; the
	// new primary still counted the slot as held, until it reclaimed it (a slot kept too long,
	// never one handed out twice). A Lost grant may have one too: its holder completed it on the
	// old primary before that primary stopped.
	LostCompletion time.Time
}

// Hold is what a worker's ledger says about one of its grants.
type Hold struct {
	Exec       int64
	Task       string
	Host       string
	Fence      int64
	ReturnedAt time.Time // StartExecution returned
	// StopAt is the last instant the holder worked. Zero with a Reason: it never worked (its
	// first check found its context cancelled). Zero without: no stop recorded (killed).
	StopAt   time.Time
	Reason   string
	Observed time.Time // when a lease loss was observed
	Result   string    // Complete's result; "" if none recorded
	// Submission and Attempt: the submission attempt the holder ran under Work (0: none).
	Submission int64
	Attempt    int
	// GrantedAt is the grant time StartExecution returned (the database's started_at); it tells
	// apart two grants of one execution id across a failover (see MergeTimelines).
	GrantedAt time.Time
	// Key and Cost are what StartExecution returned (Execution.Key, Execution.Cost; Cost 0: not
	// recorded).
	Key  string
	Cost int
	// Waited: a WaitForSlot start. Its slot may have been granted to its ticket by another
	// process's release (direct handoff) and taken only when StartExecution returned.
	Waited bool
}

// LimitChange is an operator override of a task's limit, committed within [Start, End].
type LimitChange struct {
	Task       string
	Start, End time.Time
	Limit      int
}

// Window is a fault that cut Host ("" = every host) off from the database during [Start, End].
type Window struct {
	Host       string
	Start, End time.Time
	Fault      string
}

// TaskState is a task row read from the database.
type TaskState struct {
	Tokens tokens.List
	Fence  int64
	// Open are the executions that had neither completed nor been reclaimed when the row was read.
	Open []int64
	// Pending are the tickets granted a slot by a release (protocol 4: direct handoff) that their
	// waiters had not taken yet; they hold tokens and have no execution. Handed are the fences of
	// every such grant never taken (pending, or lapsed: taken back): fences no execution carries.
	Pending, Handed []int64
}

// History is everything a run recorded.
type History struct {
	// Tasks, with the limit in force when the run began.
	InitialLimit map[string]int
	Grants       []Grant
	Holds        []Hold
	Kills        map[string]time.Time // host → when it was killed (kill -9)
	Limits       []LimitChange
	// Before is each task's row after the workers stopped and before the final sweep; After is
	// after the sweep. The sweep acquired every slot of every task and completed them.
	Before, After map[string]TaskState
	// Outages cut a host off from the database (Start: once the fault is in effect). Of those at
	// least LeaseTTL long, a holder of that host must stop by Start+LeaseTTL: its last heartbeat
	// was sent before Start.
	Outages  []Window
	LeaseTTL time.Duration // death threshold minus safety margin
	// ShortPauses paused a host for less than its lease minus a heartbeat interval: no holder
	// may be cancelled or reclaimed for it. A cancellation observed later than End+Grace is not
	// blamed on the pause.
	ShortPauses []Window
	Grace       time.Duration

	// Queues are the snapshots of the tasks' queues for a slot the observer took (check g).
	Queues []QueueSnapshot
	// Submissions are the submissions of the run as the database holds them at its end (check s).
	Submissions []SubmissionState
	// Blocks is a blocks run (check k); Section a critical-section run (check m). nil: none.
	Blocks  *BlockRun
	Section *SectionRun
	// Switches are the run's database failovers, in order (check h). With any, the task rows'
	// fences need not count the grants: they may jump at a switch.
	Switches []Switch
	// KeyLimits are the key limits of the keyed tasks (check p); a task not in it has none.
	KeyLimits map[string]KeyLimit
	// Rates are the rates of the tasks under one (check r); a task not in it has none.
	Rates map[string]Rates
	// NoLoss: the replication was synchronous (strict), so no failover may lose a grant or a
	// completion that its holder saw (check h). A grant committed on the old primary whose
	// holder never saw it (its commit waited for a standby that left) may be lost.
	NoLoss bool
}

// Violation is one broken promise.
type Violation struct {
	Check string // "a" … "h", "k", "m", "p", "r" and "s", as in the package documentation
	Task  string
	Exec  int64
	Msg   string
}

func (v Violation) String() string {
	if v.Exec != 0 {
		return fmt.Sprintf("(%s) %s exec %d: %s", v.Check, v.Task, v.Exec, v.Msg)
	}
	return fmt.Sprintf("(%s) %s: %s", v.Check, v.Task, v.Msg)
}

// Report is the checker's verdict and some figures.
type Report struct {
	Violations []Violation
	// MaxHolders is the most holders of each task seen at once, MaxCost the most cost (checks a
	// and p: the holders' and the database's).
	MaxHolders, MaxCost map[string]int
	// MaxKeyCost is, per task, the most cost one key held at once by the database's record
	// (check p); KeyGrants counts the grants check p judged against a key limit.
	MaxKeyCost, KeyGrants map[string]int
	// TaskRateUnits is, per task under a rate, its busiest window (check r); KeyRateUnits, per
	// task, that of each key under a rate that had grants.
	TaskRateUnits map[string]RateFigure
	KeyRateUnits  map[string]map[string]RateFigure
	// Holders counted per task (ledger holds matched to grants); Unrecorded grants have no ledger
	// hold (the acquire committed but its caller saw an error, or the process died before
	// recording): they are not holders, but must still end (c).
	Holders, Unrecorded map[string]int
	// Idle holders found their context cancelled on their first check and never worked.
	Idle map[string]int
	// QueueJudged counts, per task, the tickets judged by check (g): a ticket that waited
	// unoffered between two snapshots while grants were made. Skipped counts the offered tickets
	// that a grant from behind overtook (allowed), Requeued the tickets whose offer lapsed (sent
	// to the back of their priority).
	QueueJudged, Skipped, Requeued map[string]int
	// Displaced counts the unoffered tickets overtaken in a window in which a ticket of a higher
	// priority arrived (not judged: it may have taken their offer).
	Displaced map[string]int
	// Blocks and Section are the figures of checks (k) and (m), when run.
	Blocks  BlockFigures
	Section SectionFigures
	// Lost counts, per task, the grants lost in a failover that a holder saw; LostUnseen those
	// no holder saw (the commit's reply never reached its caller).
	Lost, LostUnseen map[string]int
	// SubmissionAttemptsLost counts the submission attempts whose grant a failover lost, and
	// SubmissionCompletionsLost the successful completions of attempts it lost (check s).
	SubmissionAttemptsLost, SubmissionCompletionsLost int
}

func (r *Report) add(check, task string, exec int64, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Check: check, Task: task, Exec: exec, Msg: fmt.Sprintf(format, args...)})
}

// Check runs every check on h.
func Check(h History) Report {
	c := &checkRun{h: h, r: Report{MaxHolders: map[string]int{}, MaxCost: map[string]int{}, MaxKeyCost: map[string]int{}, KeyGrants: map[string]int{},
		TaskRateUnits: map[string]RateFigure{}, KeyRateUnits: map[string]map[string]RateFigure{}, Holders: map[string]int{}, Unrecorded: map[string]int{}, Idle: map[string]int{},
		QueueJudged: map[string]int{}, Skipped: map[string]int{}, Requeued: map[string]int{}, Displaced: map[string]int{},
		Lost: map[string]int{}, LostUnseen: map[string]int{}},
		changes: map[string][]LimitChange{}}
	c.index()
	byTask := c.holdIntervals()
	for _, ch := range h.Limits {
		c.changes[ch.Task] = append(c.changes[ch.Task], ch)
	}
	c.checkOverlap(byTask)
	c.checkFences()
	c.checkEnds()
	c.checkTokens()
	c.checkOutages()
	c.checkShortPauses()
	c.checkQueues()
	c.checkSubmissions()
	c.checkBlocks()
	c.checkSection()
	c.checkFailover()
	c.checkKeys()
	c.checkRates()
	sort.SliceStable(c.r.Violations, func(i, j int) bool { return c.r.Violations[i].Check < c.r.Violations[j].Check })
	return c.r
}

// checkRun is one Check: the history, its indexes and the report being written.
type checkRun struct {
	h       History
	r       Report
	grants  map[int64]*Grant
	holds   map[int64]*Hold
	changes map[string][]LimitChange // per task, in recorded order
}

// interval is when a holder held its slot.
type interval struct {
	exec       int64
	start, end time.Time
	cost       int
}

// index maps grants and holds by execution, reporting duplicates.
func (c *checkRun) index() {
	h, r := c.h, &c.r
	c.grants = make(map[int64]*Grant, len(h.Grants))
	for i := range h.Grants {
		g := &h.Grants[i]
		if _, dup := c.grants[g.Exec]; dup {
			r.add("b", g.Task, g.Exec, "execution granted twice in the database history")
		}
		c.grants[g.Exec] = g
	}
	c.holds = make(map[int64]*Hold, len(h.Holds))
	for i := range h.Holds {
		hd := &h.Holds[i]
		if _, dup := c.holds[hd.Exec]; dup {
			r.add("b", hd.Task, hd.Exec, "two ledger holds of one execution")
			continue
		}
		c.holds[hd.Exec] = hd
	}
}

// holdIntervals matches each ledger hold with its grant (checks b, c and e on the pair) and
// returns, per task, the intervals during which holders worked.
func (c *checkRun) holdIntervals() map[string][]interval {
	h, r := c.h, &c.r
	byTask := map[string][]interval{}
	for _, hd := range h.Holds {
		g, ok := c.grants[hd.Exec]
		if !ok {
			r.add("c", hd.Task, hd.Exec, "the ledger holds a slot the database never granted")
			continue
		}
		if g.Task != hd.Task {
			r.add("b", hd.Task, hd.Exec, "ledger task %q, database task %q", hd.Task, g.Task)
		}
		if hd.Fence != g.Fence {
			r.add("b", hd.Task, hd.Exec, "holder saw fence %d, database recorded %d", hd.Fence, g.Fence)
		}
		end, ok := holdEnd(&hd, h.Kills)
		if !ok {
			r.add("c", hd.Task, hd.Exec, "holder on %s never stopped and its process was not killed", hd.Host)
			continue
		}
		if end.IsZero() { // never worked: it held nothing, but its Complete must still fail if reclaimed
			if !g.ReclaimedAt.IsZero() && hd.Result == ledger.ResultOK {
				r.add("e", hd.Task, hd.Exec, "Complete succeeded although the execution had been reclaimed at %s", ts(g.ReclaimedAt))
			}
			r.Idle[hd.Task]++
			continue
		}
		if end.Before(g.GrantedAt) {
			// Impossible unless the clocks disagree; reported, and left out of the sweep rather
			// than left open in it.
			r.add("a", hd.Task, hd.Exec, "holder stopped (%s) before its grant (%s)", ts(end), ts(g.GrantedAt))
			continue
		}
		if !g.ReclaimedAt.IsZero() {
			if !end.Before(g.ReclaimedAt) {
				r.add("e", hd.Task, hd.Exec, "holder on %s worked until %s, after its slot was reclaimed at %s", hd.Host, ts(end), ts(g.ReclaimedAt))
			}
			if hd.Result == ledger.ResultOK && (g.LostCompletion.IsZero() || !g.LostCompletion.Before(g.ReclaimedAt)) {
				r.add("e", hd.Task, hd.Exec, "Complete succeeded although the execution had been reclaimed at %s", ts(g.ReclaimedAt))
			}
		}
		if hd.Result == ledger.ResultOK && g.CompletedAt.IsZero() && g.LostCompletion.IsZero() {
			r.add("c", hd.Task, hd.Exec, "Complete succeeded but the database has no completion")
		}
		r.Holders[hd.Task]++
		byTask[hd.Task] = append(byTask[hd.Task], interval{exec: hd.Exec, start: g.GrantedAt, end: end, cost: g.cost()})
	}
	return byTask
}

// checkOverlap is check (a): it sweeps each task's intervals (ends sort before starts at the
// same instant) and compares the holders' costs at each grant with the limit that grant saw.
func (c *checkRun) checkOverlap(byTask map[string][]interval) {
	r := &c.r
	for task, ivs := range byTask {
		evs := sweepEvents(ivs)
		initial, ok := c.h.InitialLimit[task]
		if !ok {
			r.add("a", task, 0, "no initial limit known for the task")
			continue
		}
		cs := c.changes[task]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Start.Before(cs[j].Start) })
		active := map[int64]int{}
		cost := 0
		for _, e := range evs {
			if !e.start {
				cost -= active[e.exec]
				delete(active, e.exec)
				continue
			}
			active[e.exec] = e.cost
			cost += e.cost
			n := len(active)
			r.MaxHolders[task] = max(r.MaxHolders[task], n)
			r.MaxCost[task] = max(r.MaxCost[task], cost)
			if allowed := LimitFor(initial, cs, e.at); allowed >= 0 && cost > allowed {
				r.add("a", task, e.exec, "%d holders of cost %d at %s, limit in force %d: %v", n, cost, ts(e.at), allowed, sortedKeys(active))
			}
		}
	}
}

// checkFences is check (b): fences strictly increase in grant order, and the task row's fence
// counts the grants.
func (c *checkRun) checkFences() {
	r := &c.r
	perTask := map[string][]*Grant{}
	for _, g := range c.grants {
		if _, seen := c.holds[g.Exec]; g.Lost && !seen {
			continue // a lost grant nobody saw: its fence reached no one
		}
		perTask[g.Task] = append(perTask[g.Task], g)
	}
	for task, gs := range perTask {
		sort.Slice(gs, func(i, j int) bool { return gs[i].GrantedAt.Before(gs[j].GrantedAt) })
		for i := 1; i < len(gs); i++ {
			if gs[i].Fence <= gs[i-1].Fence {
				lost := ""
				if gs[i-1].Lost {
					lost = ", lost in a failover: its fence handed out again"
				}
				r.add("b", task, gs[i].Exec, "fence %d granted at %s after fence %d (exec %d%s) granted at %s",
					gs[i].Fence, ts(gs[i].GrantedAt), gs[i-1].Fence, gs[i-1].Exec, lost, ts(gs[i-1].GrantedAt))
			}
		}
		c.checkRowFence(task, gs)
	}
}

// checkRowFence is check (d) on a task's fence after the sweep: it is the last grant's, and
// without a failover it counts the grants (a switch may make it jump).
func (c *checkRun) checkRowFence(task string, gs []*Grant) {
	r := &c.r
	st, ok := c.h.After[task]
	if !ok {
		return
	}
	if n := int64(len(gs) + len(st.Handed)); len(c.h.Switches) == 0 && st.Fence != n {
		r.add("d", task, 0, "task row fence is %d but the database recorded %d grants (%d of them to tickets, never taken)", st.Fence, n, len(st.Handed))
	}
	handed := int64(0)
	if len(st.Handed) > 0 {
		handed = slices.Max(st.Handed)
	}
	for i := len(gs) - 1; i >= 0; i-- {
		if gs[i].Lost {
			continue // the row is the new primary's
		}
		if last := max(gs[i].Fence, handed); st.Fence != last {
			r.add("d", task, 0, "task row fence is %d but the last grant has fence %d", st.Fence, last)
		}
		return
	}
}

// checkEnds is check (c): every grant ends, and a reclaim took only a dead holder's slot.
func (c *checkRun) checkEnds() {
	r := &c.r
	for _, g := range c.h.Grants {
		if g.Lost {
			continue // check (h)
		}
		if _, ok := c.holds[g.Exec]; !ok {
			r.Unrecorded[g.Task]++
		}
		if g.CompletedAt.IsZero() && g.ReclaimedAt.IsZero() {
			r.add("c", g.Task, g.Exec, "grant on %s neither completed nor reclaimed: a leaked slot", g.Host)
		}
		if !g.ReclaimedAt.IsZero() {
			if silent := g.ReclaimedAt.Sub(g.LastKeepAlive); silent <= g.Threshold {
				r.add("c", g.Task, g.Exec, "reclaimed %s after its last heartbeat, within its threshold %s", silent, g.Threshold)
			}
		}
	}
}

// checkTokens is check (d): the token lists agree with the grants, before and after the sweep.
func (c *checkRun) checkTokens() {
	r := &c.r
	for task, st := range c.h.Before {
		got := st.Tokens.Grantees()
		slices.Sort(got)
		want := slices.Concat(st.Open, st.Pending)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			r.add("d", task, 0, "before the sweep the token list holds %v but the open executions are %v", got, want)
		}
	}
	for task, st := range c.h.After {
		if g := st.Tokens.Grantees(); len(g) > 0 {
			r.add("d", task, 0, "after the sweep tokens are still held by %v", g)
		}
		if len(st.Open) > 0 {
			r.add("d", task, 0, "after the sweep executions are still open: %v", st.Open)
		}
		if len(st.Pending) > 0 {
			r.add("d", task, 0, "after the sweep slots granted to tickets are still not taken: %v", st.Pending)
		}
		final := LimitFor(c.h.InitialLimit[task], c.changes[task], time.Now().Add(24*time.Hour))
		if n := len(st.Tokens.Tokens); n != final {
			r.add("d", task, 0, "after the sweep the task has %d tokens, limit %d", n, final)
		}
	}
}

// checkOutages is check (f) for holders cut off longer than their lease: they stopped within it.
func (c *checkRun) checkOutages() {
	h, r := c.h, &c.r
	for _, w := range h.Outages {
		if w.End.Sub(w.Start) < h.LeaseTTL {
			continue
		}
		for _, hd := range h.Holds {
			g, ok := c.grants[hd.Exec]
			if !ok || (w.Host != "" && hd.Host != w.Host) || !g.GrantedAt.Before(w.Start) || hd.StopAt.IsZero() || !hd.StopAt.After(w.Start) {
				continue // another host's, granted later, killed, or stopped before the outage
			}
			if hd.Waited && hd.ReturnedAt.After(w.End) {
				// A waiter whose slot was granted to its ticket before the outage and taken after
				// it: its lease runs from its session's first heartbeat after the outage, as the
				// database judges it (by that heartbeat) too.
				continue
			}
			if deadline := w.Start.Add(h.LeaseTTL); hd.StopAt.After(deadline) {
				r.add("f", hd.Task, hd.Exec, "cut off by a %s of %s from %s, it worked until %s (%q), past its lease (at the latest %s)",
					w.Fault, w.End.Sub(w.Start).Round(time.Millisecond), ts(w.Start), ts(hd.StopAt), hd.Reason, ts(deadline))
			}
		}
	}
}

// checkShortPauses is check (f) for pauses shorter than the lease: they caused nothing.
func (c *checkRun) checkShortPauses() {
	h, r := c.h, &c.r
	for _, w := range h.ShortPauses {
		for _, hd := range h.Holds {
			g, ok := c.grants[hd.Exec]
			if !ok || hd.Host != w.Host || !g.GrantedAt.Before(w.Start) {
				continue
			}
			end, ok := holdEnd(&hd, h.Kills)
			if !ok || !end.After(w.Start) {
				continue
			}
			if !g.ReclaimedAt.IsZero() && g.ReclaimedAt.Before(w.End.Add(h.Grace)) {
				r.add("f", hd.Task, hd.Exec, "reclaimed at %s after a short pause %s–%s", ts(g.ReclaimedAt), ts(w.Start), ts(w.End))
			}
			if hd.Reason == ledger.ReasonLeaseLost && hd.Observed.Before(w.End.Add(h.Grace)) {
				r.add("f", hd.Task, hd.Exec, "lease lost at %s after a short pause %s–%s", ts(hd.Observed), ts(w.Start), ts(w.End))
			}
		}
	}
}

// holdEnd is when a holder stopped holding: its recorded stop (zero if it never worked), else its
// process's kill.
func holdEnd(hd *Hold, kills map[string]time.Time) (time.Time, bool) {
	if hd.Reason != "" {
		return hd.StopAt, true
	}
	k, ok := kills[hd.Host]
	return k, ok
}

// LimitFor is the limit a grant made at t may have seen, given the task's initial limit and its
// overrides sorted by Start: inside an override's window, the larger of the limits before and
// after it. A limit of -1 (unlimited) returns -1.
func LimitFor(initial int, changes []LimitChange, t time.Time) int {
	cur := initial
	for _, c := range changes {
		if t.Before(c.Start) {
			break
		}
		if !t.After(c.End) {
			if cur == -1 || c.Limit == -1 {
				return -1
			}
			return max(cur, c.Limit)
		}
		cur = c.Limit
	}
	return cur
}

func ts(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

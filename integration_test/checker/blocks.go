package checker

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// Check (k): blocks.
//
// The database says, per block of the task, its numbers, its latest attempt and status, and
// every attempt (block_attempt): which execution took it, when (created_at, inside the taking
// transaction, so no later than its commit), its status and when it ended. The ledgers say, per
// attempt its worker learned of, when NumericBlocks returned it, when the worker last worked on
// it while its execution's context was not cancelled (the stop, written before Complete or Fail
// is called), and what that call returned. An attempt is live from its take until its stop — or,
// with no stop recorded, until its process was killed. The promises checked:
//
//	(k1) coverage: the task's blocks cover the range exactly once — sorted by their first number,
//	     the first starts at its start, each next one right after the one before it, the last
//	     ends at its end — and none is larger than the block size;
//	(k2) attempts: each block's attempts are numbered 1…n with n the block's attempt count, each
//	     taken by a granted execution of the task, and n ≤ RetryLimit+1;
//	(k3) completion: every block is completed, by exactly one attempt, its last; the ledgers
//	     record at most one successful Complete of it, by that attempt;
//	(k4) exclusion: no two attempts of a block were live at once — each was taken after the
//	     previous one's stop (or its process's kill) — and, in the database, after the previous
//	     one had ended, or its execution had ended or was dead by the database's rule (silent
//	     for longer than its threshold); and no attempt ended after the next one was taken;
//	(k5) reprocessing: an attempt that died (its process was killed before it stopped) or
//	     failed has a later attempt;
//	(k6) agreement: every attempt in the ledgers is one of the database's, by the same
//	     execution, and ended there as its Complete or Fail said (a Complete or Fail that
//	     returned ErrBlockLost left it not ended); every stop follows its take.

// BlockRun is what a blocks run recorded (check k).
type BlockRun struct {
	Task string
	// The range asked for, its block size and the retry limit of dead and failed blocks.
	From, To, Size int64
	RetryLimit     int
	// Blocks are the task's blocks as the database holds them at the end of the run.
	Blocks []BlockState
	// Logs are the attempts the ledgers recorded.
	Logs []BlockLog
}

// BlockState is a block in the database.
type BlockState struct {
	ID       int64
	From, To int64
	Attempts int    // the latest attempt
	Status   string // of the latest attempt: "not_started", "started", "completed", "failed"
	Runs     []BlockAttemptState
}

// BlockAttemptState is a row of block_attempt.
type BlockAttemptState struct {
	Attempt   int
	Exec      int64
	Status    string
	CreatedAt time.Time
	EndedAt   time.Time // zero: not ended
}

// BlockLog is what a worker's ledger says about one attempt of a block.
type BlockLog struct {
	Block    int64
	Attempt  int
	Exec     int64
	Host     string
	From, To int64
	TakenAt  time.Time // NumericBlocks returned it
	Started  time.Time // Start returned (zero: not started)
	// Stopped: a stop was recorded; StopAt is then the last instant the worker worked on the
	// attempt (zero: never). Calling is the call made next ("complete", "fail"), Reason why
	// none was (ledger.ReasonCancelled, ledger.ReasonError).
	Stopped bool
	StopAt  time.Time
	Calling string
	Reason  string
	// Result is what that call returned (ledger.BlockCompleted, …; "": none recorded).
	Result string
}

// BlockFigures are the figures of check (k).
type BlockFigures struct {
	Blocks, Attempts int
	// Failed attempts (in the database), Dead ones (not ended, their process killed before they
	// stopped), Lost ones (Complete or Fail returned ErrBlockLost), Unrecorded ones (in the
	// database, not in any ledger: the process died before recording them).
	Failed, Dead, Lost, Unrecorded int
	MostAttempts                   int
	Retaken                        int // blocks with more than one attempt
}

// maxBlockReports bounds the violations of one kind reported per run (the rest are counted).
const maxBlockReports = 20

// checkBlocks is check (k).
// blockKey names one attempt of one block.
type blockKey struct {
	block   int64
	attempt int
}

// blockCheck is one run of check k.
type blockCheck struct {
	c      *checkRun
	br     *BlockRun
	f      *BlockFigures
	counts map[string]int
	logs   map[blockKey]*BlockLog // the ledgers' attempts
	seen   map[blockKey]bool      // the database's attempts
}

func (k *blockCheck) report(kind string, exec int64, format string, args ...any) {
	k.counts[kind]++
	if k.counts[kind] <= maxBlockReports {
		k.c.r.add("k", k.br.Task, exec, format, args...)
	} else if k.counts[kind] == maxBlockReports+1 {
		k.c.r.add("k", k.br.Task, 0, "more (%s) violations left out", kind)
	}
}

func (c *checkRun) checkBlocks() {
	br := c.h.Blocks
	if br == nil {
		return
	}
	k := &blockCheck{c: c, br: br, f: &c.r.Blocks, counts: map[string]int{}, logs: map[blockKey]*BlockLog{}, seen: map[blockKey]bool{}}
	blocks := slices.Clone(br.Blocks)
	sort.Slice(blocks, func(i, j int) bool { return blocks[i].From < blocks[j].From })
	k.f.Blocks = len(blocks)
	k.coverage(blocks)
	k.indexLogs()
	for _, b := range blocks {
		runs := slices.Clone(b.Runs)
		sort.Slice(runs, func(i, j int) bool { return runs[i].Attempt < runs[j].Attempt })
		k.f.Attempts += len(runs)
		k.f.MostAttempts = max(k.f.MostAttempts, len(runs))
		if len(runs) > 1 {
			k.f.Retaken++
		}
		k.attemptsOf(b, runs)
		k.completionOf(b, runs)
		var prevEnd time.Time // the previous attempt's stop on its worker's side, or its process's kill
		var prev *BlockAttemptState
		for i := range runs {
			a := &runs[i]
			end := k.attempt(b, a, i == len(runs)-1, prev, prevEnd)
			prev, prevEnd = a, end
		}
	}
	// (k6) every ledger attempt is one of the database's.
	for key, l := range k.logs {
		if !k.seen[key] {
			k.report("k6", l.Exec, "the ledger on %s took block %d attempt %d; the database has no such attempt", l.Host, l.Block, l.Attempt)
		}
	}
}

// coverage is (k1): the blocks, sorted by start, cover the range once.
func (k *blockCheck) coverage(blocks []BlockState) {
	br := k.br
	if len(blocks) == 0 {
		k.report("k1", 0, "no blocks: the range %d…%d was not covered", br.From, br.To)
	} else {
		if blocks[0].From != br.From {
			k.report("k1", 0, "the first block starts at %d, the range at %d", blocks[0].From, br.From)
		}
		if last := blocks[len(blocks)-1]; last.To != br.To {
			k.report("k1", 0, "the last block (%d) ends at %d, the range at %d", last.ID, last.To, br.To)
		}
	}
	for i, b := range blocks {
		if b.To < b.From || b.To-b.From+1 > br.Size {
			k.report("k1", 0, "block %d is %d…%d: more than %d numbers, or none", b.ID, b.From, b.To, br.Size)
		}
		if i == 0 {
			continue
		}
		switch p := blocks[i-1]; {
		case b.From <= p.To:
			k.report("k1", 0, "block %d (%d…%d) overlaps block %d (%d…%d)", b.ID, b.From, b.To, p.ID, p.From, p.To)
		case b.From > p.To+1:
			k.report("k1", 0, "gap %d…%d between block %d and block %d", p.To+1, b.From-1, p.ID, b.ID)
		}
	}
}

// indexLogs indexes the ledgers' attempts by block and attempt.
func (k *blockCheck) indexLogs() {
	for i := range k.br.Logs {
		l := &k.br.Logs[i]
		key := blockKey{l.Block, l.Attempt}
		if _, dup := k.logs[key]; dup {
			k.report("k6", l.Exec, "the ledgers record attempt %d of block %d twice", l.Attempt, l.Block)
			continue
		}
		k.logs[key] = l
	}
}

// attemptsOf is (k2) for a block's attempts together: numbered 1…n, counted, within the limit.
func (k *blockCheck) attemptsOf(b BlockState, runs []BlockAttemptState) {
	for i, a := range runs {
		if a.Attempt != i+1 {
			k.report("k2", a.Exec, "block %d: attempts numbered %v, not 1…%d", b.ID, blockAttemptNumbers(runs), len(runs))
			break
		}
	}
	if len(runs) != b.Attempts {
		k.report("k2", 0, "block %d counts %d attempts but %d were taken", b.ID, b.Attempts, len(runs))
	}
	if len(runs) > k.br.RetryLimit+1 {
		k.report("k2", 0, "block %d was attempted %d times; its retry limit %d allows %d", b.ID, len(runs), k.br.RetryLimit, k.br.RetryLimit+1)
	}
}

// completionOf is (k3): completed, by exactly one attempt, its last.
func (k *blockCheck) completionOf(b BlockState, runs []BlockAttemptState) {
	if b.Status != "completed" {
		k.report("k3", 0, "block %d (%d…%d) is %s after %d attempts", b.ID, b.From, b.To, b.Status, len(runs))
	}
	completed, oks := 0, 0
	for i, a := range runs {
		if a.Status == "completed" {
			completed++
			if i != len(runs)-1 {
				k.report("k3", a.Exec, "block %d: attempt %d completed but is not its last (%d)", b.ID, a.Attempt, len(runs))
			}
		}
		if l := k.logs[blockKey{b.ID, a.Attempt}]; l != nil && l.Result == ledger.BlockCompleted {
			oks++
		}
	}
	if completed != 1 {
		k.report("k3", 0, "block %d was completed by %d attempts", b.ID, completed)
	}
	if oks > 1 {
		k.report("k3", 0, "the ledgers record %d successful Completes of block %d", oks, b.ID)
	}
}

// attempt checks one attempt — (k2) its execution, (k6) its ledger, (k4) against the previous
// attempt, (k5) if it is the last — and returns its end on its worker's side.
func (k *blockCheck) attempt(b BlockState, a *BlockAttemptState, last bool, prev *BlockAttemptState, prevEnd time.Time) time.Time {
	key := blockKey{b.ID, a.Attempt}
	k.seen[key] = true
	g, granted := k.c.grants[a.Exec]
	switch {
	case !granted:
		k.report("k2", a.Exec, "block %d attempt %d taken by an execution never granted a slot", b.ID, a.Attempt)
	case g.Task != k.br.Task:
		k.report("k2", a.Exec, "block %d attempt %d taken by an execution of task %s", b.ID, a.Attempt, g.Task)
	case a.CreatedAt.Before(g.GrantedAt):
		k.report("k2", a.Exec, "block %d attempt %d taken at %s, before its execution was granted (%s)", b.ID, a.Attempt, ts(a.CreatedAt), ts(g.GrantedAt))
	}
	if a.Status == "failed" {
		k.f.Failed++
	}
	l := k.logs[key]
	if l == nil {
		k.f.Unrecorded++
	} else {
		k.ledgerAgrees(b, a, l)
	}
	k.notOverlapping(b, a, prev, prevEnd)
	// This attempt's end on its worker's side: its stop, else its process's kill.
	host := ""
	if granted {
		host = g.Host
	} else if l != nil {
		host = l.Host
	}
	kill, killed := k.c.h.Kills[host]
	killed = killed && kill.After(a.CreatedAt)
	end, known := time.Time{}, false
	switch {
	case l != nil && l.Stopped:
		end, known = l.StopAt, true
		if end.IsZero() {
			end = a.CreatedAt // never worked on it
		}
	case killed:
		end, known = kill, true
	}
	// Dead: not ended in the database, its process killed after it was taken.
	dead := killed && a.Status != "completed" && a.Status != "failed"
	if dead {
		k.f.Dead++
	}
	if !known && l != nil {
		k.report("k6", a.Exec, "block %d attempt %d: its worker on %s recorded no stop and its process was not killed", b.ID, a.Attempt, l.Host)
	}
	// (k5) reprocessing.
	if last {
		switch {
		case dead:
			k.report("k5", a.Exec, "block %d: attempt %d died with its process (killed %s) and was not taken again", b.ID, a.Attempt, ts(kill))
		case a.Status == "failed":
			k.report("k5", a.Exec, "block %d: attempt %d failed and was not taken again", b.ID, a.Attempt)
		}
	}
	return end
}

// ledgerAgrees is (k6) for one attempt: its ledger and the database agree.
func (k *blockCheck) ledgerAgrees(b BlockState, a *BlockAttemptState, l *BlockLog) {
	if l.Exec != a.Exec {
		k.report("k6", l.Exec, "the ledger on %s took block %d attempt %d under this execution; the database under execution %d",
			l.Host, b.ID, a.Attempt, a.Exec)
	}
	if l.From != b.From || l.To != b.To {
		k.report("k6", l.Exec, "the ledger on %s took block %d as %d…%d; the database holds %d…%d", l.Host, b.ID, l.From, l.To, b.From, b.To)
	}
	want := map[string]string{ledger.BlockCompleted: "completed", ledger.BlockFailed: "failed"}[l.Result]
	switch {
	case want != "" && a.Status != want:
		k.report("k6", l.Exec, "block %d attempt %d: the worker's %s succeeded, the database has it %s", b.ID, a.Attempt, l.Calling, a.Status)
	case l.Result == ledger.BlockLost && (a.Status == "completed" || a.Status == "failed"):
		k.report("k6", l.Exec, "block %d attempt %d: the worker's %s returned ErrBlockLost, the database has it %s", b.ID, a.Attempt, l.Calling, a.Status)
	}
	if l.Result == ledger.BlockLost {
		k.f.Lost++
	}
	if l.Stopped && !l.StopAt.IsZero() && l.StopAt.Before(a.CreatedAt) {
		k.report("k6", l.Exec, "block %d attempt %d: its worker stopped (%s) before the attempt was taken (%s)", b.ID, a.Attempt, ts(l.StopAt), ts(a.CreatedAt))
	}
}

// notOverlapping is (k4): attempt a was taken once the previous one was over, on the ledgers'
// side (its stop, or its process's kill) and on the database's.
func (k *blockCheck) notOverlapping(b BlockState, a, prev *BlockAttemptState, prevEnd time.Time) {
	if prev == nil {
		return
	}
	if !prevEnd.IsZero() && a.CreatedAt.Before(prevEnd) {
		k.report("k4", a.Exec, "block %d: attempt %d taken at %s while attempt %d (execution %d) was live until %s",
			b.ID, a.Attempt, ts(a.CreatedAt), prev.Attempt, prev.Exec, ts(prevEnd))
	}
	if !prev.EndedAt.IsZero() && prev.EndedAt.After(a.CreatedAt) {
		k.report("k4", prev.Exec, "block %d: attempt %d ended (%s) at %s, after attempt %d was taken at %s",
			b.ID, prev.Attempt, prev.Status, ts(prev.EndedAt), a.Attempt, ts(a.CreatedAt))
	}
	if why := k.c.stillLive(prev, a.CreatedAt); why != "" {
		k.report("k4", a.Exec, "block %d: attempt %d taken at %s while attempt %d (execution %d) %s",
			b.ID, a.Attempt, ts(a.CreatedAt), prev.Attempt, prev.Exec, why)
	}
}

// stillLive says why attempt a may still have been live at t by the database's rule ("" if it
// was not): it had not ended, and its execution had neither ended nor been silent for longer
// than its threshold. The last heartbeat known is the one the database holds at the end of the
// run: an execution silent at t that heartbeats again later (its process resumed before anyone
// reclaimed it) would be blamed wrongly; a killed process's never does.
func (c *checkRun) stillLive(a *BlockAttemptState, t time.Time) string {
	if !a.EndedAt.IsZero() && a.EndedAt.Before(t) {
		return ""
	}
	g, ok := c.grants[a.Exec]
	if !ok {
		return "" // reported by (k2)
	}
	for _, end := range []time.Time{g.CompletedAt, g.ReclaimedAt} {
		if !end.IsZero() && end.Before(t) {
			return ""
		}
	}
	if silent := t.Sub(g.LastKeepAlive); silent > g.Threshold {
		return ""
	}
	return fmt.Sprintf("had not ended and its execution was alive (last heartbeat %s, threshold %s)", ts(g.LastKeepAlive), g.Threshold)
}

func blockAttemptNumbers(runs []BlockAttemptState) []int {
	out := make([]int, len(runs))
	for i, a := range runs {
		out[i] = a.Attempt
	}
	return out
}

package checker

import (
	"testing"
	"time"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// blockHistory is a valid blocks run of task "b" (limit 2) over the range 1…30 in blocks of 10,
// retry limit 1. Exec 1 (w1) takes blocks 101 and 102: it fails 101 on purpose and completes
// 102. Exec 2 (w2) takes block 103 and its process is killed at 200 ms (last heartbeat 150 ms,
// threshold 1 s). Exec 3 (w1) takes 101 (failed) and 103 (dead) again at 1310 ms and completes
// both.
func blockHistory() History {
	grant := func(exec, fence int64, host string, granted, completed, reclaimed, hb int) Grant {
		g := Grant{Exec: exec, Task: "b", Host: host, Fence: fence, GrantedAt: at(granted), LastKeepAlive: at(hb), Threshold: time.Second}
		if completed > 0 {
			g.CompletedAt = at(completed)
		}
		if reclaimed > 0 {
			g.ReclaimedAt = at(reclaimed)
		}
		return g
	}
	attempt := func(n int, exec int64, status string, created, ended int) BlockAttemptState {
		a := BlockAttemptState{Attempt: n, Exec: exec, Status: status, CreatedAt: at(created)}
		if ended > 0 {
			a.EndedAt = at(ended)
		}
		return a
	}
	log := func(block int64, n int, exec int64, host string, from, to int64, taken, stop int, calling, result string) BlockLog {
		l := BlockLog{Block: block, Attempt: n, Exec: exec, Host: host, From: from, To: to, TakenAt: at(taken)}
		if stop > 0 {
			l.Stopped, l.StopAt, l.Calling, l.Result = true, at(stop), calling, result
		}
		return l
	}
	return History{
		InitialLimit: map[string]int{"b": 2},
		Grants: []Grant{
			grant(1, 1, "w1", 0, 300, 0, 290),
			grant(2, 2, "w2", 10, 0, 1300, 150),
			grant(3, 3, "w1", 1300, 1700, 0, 1690),
		},
		Kills: map[string]time.Time{"w2": at(200)},
		Blocks: &BlockRun{Task: "b", From: 1, To: 30, Size: 10, RetryLimit: 1,
			Blocks: []BlockState{
				{ID: 101, From: 1, To: 10, Attempts: 2, Status: "completed", Runs: []BlockAttemptState{
					attempt(1, 1, "failed", 20, 100), attempt(2, 3, "completed", 1310, 1400)}},
				{ID: 102, From: 11, To: 20, Attempts: 1, Status: "completed", Runs: []BlockAttemptState{
					attempt(1, 1, "completed", 20, 200)}},
				{ID: 103, From: 21, To: 30, Attempts: 2, Status: "completed", Runs: []BlockAttemptState{
					attempt(1, 2, "started", 30, 0), attempt(2, 3, "completed", 1310, 1500)}},
			},
			Logs: []BlockLog{
				log(101, 1, 1, "w1", 1, 10, 22, 95, "fail", ledger.BlockFailed),
				log(102, 1, 1, "w1", 11, 20, 22, 195, "complete", ledger.BlockCompleted),
				log(103, 1, 2, "w2", 21, 30, 32, 0, "", ""), // killed while working on it
				log(101, 2, 3, "w1", 1, 10, 1312, 1395, "complete", ledger.BlockCompleted),
				log(103, 2, 3, "w1", 21, 30, 1312, 1495, "complete", ledger.BlockCompleted),
			},
		},
	}
}

func TestBlockHistoryPasses(t *testing.T) {
	r := Check(blockHistory())
	if len(r.Violations) > 0 {
		t.Fatalf("violations on a valid blocks history: %v", r.Violations)
	}
	want := BlockFigures{Blocks: 3, Attempts: 5, Failed: 1, Dead: 1, MostAttempts: 2, Retaken: 2}
	if r.Blocks != want {
		t.Fatalf("figures %+v, want %+v", r.Blocks, want)
	}
}

// TestCheckerCatchesBlockFaults breaks the blocks history in one way per case: each must be
// reported by check (k).
func TestCheckerCatchesBlockFaults(t *testing.T) {
	block := func(h *History, id int64) *BlockState {
		for i := range h.Blocks.Blocks {
			if h.Blocks.Blocks[i].ID == id {
				return &h.Blocks.Blocks[i]
			}
		}
		panic("no block")
	}
	logOf := func(h *History, id int64, attempt int) *BlockLog {
		for i := range h.Blocks.Logs {
			if l := &h.Blocks.Logs[i]; l.Block == id && l.Attempt == attempt {
				return l
			}
		}
		panic("no log")
	}
	cases := []struct {
		name string
		want string
		edit func(h *History)
	}{
		// (k1) coverage.
		{"gap", "gap 11…11 between block 101 and block 102", func(h *History) { block(h, 102).From = 12 }},
		{"overlap", "overlaps block 101", func(h *History) { block(h, 102).From = 10 }},
		{"block created twice", "overlaps block", func(h *History) {
			dup := *block(h, 102)
			dup.ID = 104
			h.Blocks.Blocks = append(h.Blocks.Blocks, dup)
		}},
		{"range start missed", "the first block starts at 2", func(h *History) { block(h, 101).From = 2 }},
		{"range end missed", "ends at 29, the range at 30", func(h *History) { block(h, 103).To = 29 }},
		{"block too large", "more than 5 numbers", func(h *History) { h.Blocks.Size = 5 }},
		{"no blocks", "was not covered", func(h *History) { h.Blocks.Blocks, h.Blocks.Logs = nil, nil }},
		// (k2) attempts.
		{"past the retry limit", "attempted 2 times; its retry limit 0 allows 1", func(h *History) { h.Blocks.RetryLimit = 0 }},
		{"attempts misnumbered", "attempts numbered [1 3]", func(h *History) { block(h, 101).Runs[1].Attempt = 3 }},
		{"attempt count disagrees", "counts 3 attempts but 2 were taken", func(h *History) { block(h, 103).Attempts = 3 }},
		{"taken by an execution never granted", "never granted a slot", func(h *History) { block(h, 102).Runs[0].Exec = 9 }},
		{"taken before its execution's grant", "before its execution was granted", func(h *History) {
			block(h, 101).Runs[1].CreatedAt = at(1250)
		}},
		// (k3) completion.
		{"block not completed", "is failed after 1 attempts", func(h *History) {
			b := block(h, 102)
			b.Status, b.Runs[0].Status = "failed", "failed"
			logOf(h, 102, 1).Calling, logOf(h, 102, 1).Result = "fail", ledger.BlockFailed
		}},
		{"completed by two attempts", "completed by 2 attempts", func(h *History) {
			block(h, 101).Runs[0].Status = "completed"
			logOf(h, 101, 1).Calling, logOf(h, 101, 1).Result = "complete", ledger.BlockCompleted
		}},
		{"two successful Completes in the ledgers", "record 2 successful Completes of block 101", func(h *History) {
			logOf(h, 101, 1).Result = ledger.BlockCompleted
		}},
		// (k4) exclusion.
		{"taken while the last attempt was live", "while attempt 1 (execution 2) was live until", func(h *History) {
			block(h, 103).Runs[1].CreatedAt = at(150) // w2 was killed at 200
			h.Grants[2].GrantedAt = at(140)
		}},
		{"taken while the last attempt's execution was alive", "had not ended and its execution was alive", func(h *History) {
			// The worker stopped at 40 ms (so the ledgers see no overlap), but its execution was
			// alive by the database's rule when the block was taken again at 1100 ms.
			logOf(h, 103, 1).Stopped, logOf(h, 103, 1).StopAt = true, at(40)
			block(h, 103).Runs[1].CreatedAt = at(1100)
			h.Grants[2].GrantedAt = at(1050)
			h.Grants[1].ReclaimedAt = at(1200)
		}},
		{"an attempt ended after the next was taken", "after attempt 2 was taken", func(h *History) {
			block(h, 101).Runs[0].EndedAt = at(1320)
		}},
		// (k5) reprocessing.
		{"dead attempt not taken again", "died with its process", func(h *History) {
			b := block(h, 103)
			b.Runs, b.Attempts, b.Status = b.Runs[:1], 1, "started"
			h.Blocks.Logs = h.Blocks.Logs[:4]
		}},
		{"failed attempt not taken again", "failed and was not taken again", func(h *History) {
			b := block(h, 101)
			b.Runs, b.Attempts, b.Status = b.Runs[:1], 1, "failed"
			h.Blocks.Logs = append(h.Blocks.Logs[:3], h.Blocks.Logs[4])
		}},
		// (k6) agreement.
		{"ledger attempt unknown to the database", "the database has no such attempt", func(h *History) {
			h.Blocks.Logs = append(h.Blocks.Logs, BlockLog{Block: 102, Attempt: 2, Exec: 3, Host: "w1", From: 11, To: 20, TakenAt: at(1312)})
		}},
		{"ledger attempt of another execution", "under this execution; the database under execution 1", func(h *History) {
			logOf(h, 102, 1).Exec = 3
		}},
		{"ledger block with other numbers", "the database holds 11…20", func(h *History) { logOf(h, 102, 1).To = 21 }},
		{"complete succeeded, the database failed it", "the worker's complete succeeded, the database has it failed", func(h *History) {
			block(h, 101).Runs[0].Status = "failed"
			l := logOf(h, 101, 1)
			l.Calling, l.Result = "complete", ledger.BlockCompleted
		}},
		{"ErrBlockLost but ended", "returned ErrBlockLost, the database has it completed", func(h *History) {
			logOf(h, 102, 1).Result = ledger.BlockLost
		}},
		{"no stop and not killed", "recorded no stop and its process was not killed", func(h *History) {
			l := logOf(h, 102, 1)
			l.Stopped, l.StopAt, l.Result = false, time.Time{}, ""
		}},
		{"stopped before it was taken", "before the attempt was taken", func(h *History) {
			logOf(h, 102, 1).StopAt = at(10)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := blockHistory()
			c.edit(&h)
			requireViolation(t, Check(h), "k", c.want)
		})
	}
}

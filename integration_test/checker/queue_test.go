package checker

import (
	"testing"
	"time"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// fullHistory is cleanHistory with sessions, submissions and queue snapshots: a valid run of
// every check. Submission 12 ran once (exec 1); submission 10's first attempt (exec 2) died with
// w2 and its second (exec 3) completed; submission 11's first attempt (exec 4) lost its lease in
// w3's partition and its second (exec 5) completed. The queue: w2's ticket 102 is granted (exec 2)
// ahead of w1's 103; later w4's ticket 301, offered a slot it does not take, is overtaken by w1's
// 302 (exec 5) and then sent to the back of the line.
func fullHistory() History {
	h := cleanHistory()
	h.Grants[3].CompletedAt = time.Time{} // exec 4 ended once: reclaimed
	sessions := map[string]int64{"w1": 1, "w2": 2, "w3": 3, "sweeper": 9}
	for i := range h.Grants {
		h.Grants[i].Session = sessions[h.Grants[i].Host]
	}
	link := func(i int, sub int64, attempt int) { h.Holds[i].Submission, h.Holds[i].Attempt = sub, attempt }
	link(0, 12, 1)
	link(1, 10, 1)
	link(2, 10, 2)
	link(3, 11, 1)
	link(4, 11, 2)
	h.Submissions = []SubmissionState{
		{ID: 10, Task: "t", Status: "completed", Attempts: 2, MaxAttempts: 3, ExecutionID: 3, Runs: []AttemptRun{{1, 2}, {2, 3}}},
		{ID: 11, Task: "t", Status: "completed", Attempts: 2, MaxAttempts: 3, ExecutionID: 5, Runs: []AttemptRun{{1, 4}, {2, 5}}},
		{ID: 12, Task: "t", Status: "completed", Attempts: 1, MaxAttempts: 3, ExecutionID: 1, Runs: []AttemptRun{{1, 1}}},
	}
	tk := func(id, session int64, queued, offered int) Ticket {
		t := Ticket{ID: id, Session: session, QueuedAt: at(queued)}
		if offered > 0 {
			t.OfferedAt = at(offered)
		}
		return t
	}
	h.Queues = []QueueSnapshot{
		{Task: "t", At: at(105), Fence: 1, Tickets: []Ticket{tk(102, 2, 100, 100), tk(103, 1, 101, 0)}},
		{Task: "t", At: at(120), Fence: 2, Tickets: []Ticket{tk(103, 1, 101, 0)}},
		{Task: "t", At: at(2550), Fence: 3},
		{Task: "t", At: at(5400), Fence: 4, Tickets: []Ticket{tk(301, 4, 5000, 5300), tk(302, 1, 5100, 0)}},
		{Task: "t", At: at(5550), Fence: 5, Tickets: []Ticket{tk(301, 4, 5000, 5300)}},
		{Task: "t", At: at(7000), Fence: 5, Tickets: []Ticket{tk(301, 4, 6800, 0)}},
	}
	return h
}

func TestFullHistoryPasses(t *testing.T) {
	r := Check(fullHistory())
	if len(r.Violations) > 0 {
		t.Fatalf("violations on a valid history: %v", r.Violations)
	}
	if r.QueueJudged["t"] != 1 || r.Skipped["t"] != 1 || r.Requeued["t"] != 1 {
		t.Fatalf("judged %d, skipped %d, requeued %d; want 1 of each", r.QueueJudged["t"], r.Skipped["t"], r.Requeued["t"])
	}
}

// TestCheckerCatchesQueueAndSubmissionFaults breaks the full history in one way per case: each
// must be reported by the check named.
func TestCheckerCatchesQueueAndSubmissionFaults(t *testing.T) {
	cases := []struct {
		name  string
		check string
		want  string
		edit  func(h *History)
	}{
		// (g) queue order.
		{"grant past an unoffered ticket", "g", "waited ahead of it unoffered", func(h *History) {
			// 301 never offered, yet 302 (behind it) was granted.
			h.Queues[3].Tickets[0].OfferedAt = time.Time{}
			h.Queues[4].Tickets[0].OfferedAt = time.Time{}
		}},
		{"priority inversion", "g", "waited ahead of it unoffered", func(h *History) {
			// 301 waits at priority 1, unoffered, ahead of 302 (priority 0) which queued first;
			// exec 5 (302's, priority 0) is granted past it: first come, but not first served.
			for _, q := range h.Queues[3:] {
				q.Tickets[0].Priority, q.Tickets[0].OfferedAt = 1, time.Time{}
			}
			h.Queues[3].Tickets[1].QueuedAt = at(4900)
		}},
		{"offer withdrawn", "g", "its offer is never", func(h *History) {
			h.Queues[4].Tickets[0].OfferedAt = time.Time{}
		}},
		{"barging: a grant with no ticket past a waiter", "g", "waited ahead of it unoffered", func(h *History) {
			h.Queues[0].Tickets = h.Queues[0].Tickets[1:] // w2 never queued, yet exec 2 was granted past 103
		}},
		{"queue out of order within a priority", "g", "queue out of order", func(h *History) {
			q := h.Queues[3].Tickets
			q[0], q[1] = q[1], q[0]
		}},
		{"queue out of priority order", "g", "queue out of order", func(h *History) {
			h.Queues[3].Tickets[1].Priority = 1
		}},
		{"ticket twice in the queue", "g", "twice in the queue", func(h *History) {
			h.Queues[3].Tickets[1].ID = 301
		}},
		{"fence backwards", "g", "went from 5", func(h *History) {
			h.Queues[5].Fence = 3
		}},
		// (s) submissions.
		{"submission not completed", "s", "is waiting after 1 of 3 attempts", func(h *History) {
			h.Submissions[2].Status = "waiting"
		}},
		{"completed twice in the database", "s", "completed 2 times in the database", func(h *History) {
			h.Grants[1].CompletedAt, h.Grants[1].ReclaimedAt = at(300), time.Time{}
		}},
		{"attempt after completion", "s", "ran after the submission had completed", func(h *History) {
			h.Submissions[2].Runs = append(h.Submissions[2].Runs, AttemptRun{2, 6})
			h.Submissions[2].Attempts = 2
		}},
		{"attempts misnumbered", "s", "attempts numbered [1 3]", func(h *History) {
			h.Submissions[0].Runs[1].Attempt = 3
		}},
		{"attempt count disagrees", "s", "counts 3 attempts but 2 were run", func(h *History) {
			h.Submissions[0].Attempts = 3
		}},
		{"names another execution", "s", "but names execution 2", func(h *History) {
			h.Submissions[0].ExecutionID = 2
		}},
		{"next attempt granted before the last ended", "s", "before attempt 1 (execution 2) ended", func(h *History) {
			h.Grants[2].GrantedAt = at(2400)
		}},
		{"two successful completions in the ledgers", "s", "record 2 successful completions", func(h *History) {
			h.Holds[1].Result = ledger.ResultOK // exec 2, whose holder was killed, "completed" too
		}},
		{"ledger completion of another execution", "s", "completed submission 11 (attempt 1) under this execution", func(h *History) {
			h.Holds[3].Result = ledger.ResultOK
		}},
		{"worker ran another attempt than the database's", "s", "links the execution to submission 10 attempt 2", func(h *History) {
			h.Holds[2].Attempt = 3
		}},
		{"attempts held at once", "s", "held from", func(h *History) {
			h.Kills["w2"] = at(2600) // exec 2 (attempt 1) still held when exec 3 (attempt 2) was granted at 2500
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := fullHistory()
			c.edit(&h)
			requireViolation(t, Check(h), c.check, c.want)
		})
	}
}

// TestQueueTolerance: what the design allows is not reported.
func TestQueueTolerance(t *testing.T) {
	for _, c := range []struct {
		name      string
		edit      func(h *History)
		displaced int // tickets left unjudged for a higher priority's arrival
	}{
		{"a requeued ticket may be overtaken", func(h *History) {
			h.Queues[4].Tickets[0].QueuedAt, h.Queues[4].Tickets[0].OfferedAt = at(5450), time.Time{}
		}, 0},
		{"a higher priority goes first", func(h *History) {
			h.Queues[3].Tickets[0].OfferedAt = time.Time{}
			h.Queues[4].Tickets[0].OfferedAt = time.Time{}
			h.Grants[4].Priority = 1
		}, 0},
		{"a higher priority arriving in the granting transaction takes the offer", func(h *History) {
			// 302 (behind 301) is granted; in the same transaction ticket 303 of a higher
			// priority queues ahead of 301 and is offered the last free slot instead of 301.
			h.Queues[3].Tickets[0].OfferedAt = time.Time{}
			h.Queues[4].Tickets = []Ticket{{ID: 303, Session: 1, Priority: 1, QueuedAt: at(5500), OfferedAt: at(5500)}, h.Queues[4].Tickets[0]}
			h.Queues[4].Tickets[1].OfferedAt = time.Time{}
			h.Queues[5].Tickets = append([]Ticket{h.Queues[4].Tickets[0]}, h.Queues[5].Tickets...)
		}, 1},
		{"a ticket that left or died excuses its process's grant", func(h *History) {
			h.Queues[3].Tickets = append([]Ticket{{ID: 300, Session: 1, QueuedAt: at(4900)}}, h.Queues[3].Tickets...)
			h.Queues[3].Tickets[1].OfferedAt = time.Time{}
			h.Queues[4].Tickets[0].OfferedAt = time.Time{}
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := fullHistory()
			c.edit(&h)
			r := Check(h)
			if len(r.Violations) > 0 {
				t.Fatalf("violations: %v", r.Violations)
			}
			if r.Displaced["t"] != c.displaced {
				t.Fatalf("displaced %d, want %d", r.Displaced["t"], c.displaced)
			}
		})
	}
}

func TestParseQueue(t *testing.T) {
	q, err := ParseQueue("W:5,P:2,R:-1,Q:1000,O:0,D:2000000,X:1250000|W:6,P:3,R:-1,Q:1001,O:1500,D:2000000,X:1250000")
	if err != nil {
		t.Fatal(err)
	}
	want := []Ticket{
		{ID: 5, Session: 2, Priority: -1, QueuedAt: time.UnixMicro(1000).UTC()},
		{ID: 6, Session: 3, Priority: -1, QueuedAt: time.UnixMicro(1001).UTC(), OfferedAt: time.UnixMicro(1500).UTC()},
	}
	if len(q) != 2 || q[0] != want[0] || q[1] != want[1] {
		t.Fatalf("got %+v, want %+v", q, want)
	}
	if q, err := ParseQueue(""); err != nil || q != nil {
		t.Fatalf("empty queue: %v, %v", q, err)
	}
	for _, bad := range []string{"W:5,P:2", "W:5,P:2,R:x,Q:1,O:0", "garbage"} {
		if _, err := ParseQueue(bad); err == nil {
			t.Errorf("ParseQueue(%q) did not fail", bad)
		}
	}
}

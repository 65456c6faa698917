package taskling

import (
	"context"
	"time"
)

// StopHeartbeatForTest freezes the heartbeats of the execution's client, as if its process
// froze: no heartbeat is sent or extends a lease any more, for this execution and every other of
// the client (the database judges them all by the session's last heartbeat), leaving their slots
// held, so tests can watch the slots being reclaimed.
func (e *Execution) StopHeartbeatForTest() { e.c.hb.freeze() }

// PassLeaseDeadlineForTest puts the execution where a process resumed after a pause past its
// lease deadline is before its lease timer has run: no heartbeat extends it, timer stopped,
// deadline past.
func (e *Execution) PassLeaseDeadlineForTest() {
	e.c.hb.remove(e)
	e.mu.Lock()
	e.frozen = true
	e.leaseTimer.Stop()
	e.leaseDeadline = time.Now().Add(-time.Millisecond)
	e.mu.Unlock()
}

// OnClaimDeniedForTest makes f run each time a scheduler claim of c is denied for the limit,
// between the denied transaction and the wait that follows it.
func (c *Client) OnClaimDeniedForTest(f func()) { c.testHooks.claimDenied = f }

// CheckJSONBForTest reports what PostgreSQL's jsonb would refuse in b (valid JSON).
func CheckJSONBForTest(b []byte) error { return checkJSONB(b) }

// CompactSubmissionTallyForTest compacts the submission tally now.
func (c *Client) CompactSubmissionTallyForTest(ctx context.Context) (int64, error) {
	return c.subs.CompactSubmissionTally(ctx)
}

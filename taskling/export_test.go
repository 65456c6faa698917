package taskling

import "time"

// StopHeartbeatForTest stops the execution's heartbeat as if its process froze, leaving its slot
// held, so tests can watch the slot being reclaimed.
func (e *Execution) StopHeartbeatForTest() {
	e.stopHeartbeat()
	<-e.heartbeatDone
}

// PassLeaseDeadlineForTest puts the execution where a process resumed after a pause past its
// lease deadline is before its lease timer has run: heartbeat and timer stopped, deadline past.
func (e *Execution) PassLeaseDeadlineForTest() {
	e.stopHeartbeat()
	<-e.heartbeatDone
	e.mu.Lock()
	e.leaseTimer.Stop()
	e.leaseDeadline = time.Now().Add(-time.Millisecond)
	e.mu.Unlock()
}

// OnClaimDeniedForTest makes f run each time a scheduler claim of c is denied for the limit,
// between the denied transaction and the wait that follows it.
func (c *Client) OnClaimDeniedForTest(f func()) { c.testHooks.claimDenied = f }

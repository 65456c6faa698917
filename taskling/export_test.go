package taskling

import (
	"context"
	"time"

	"github.com/taskling-go/taskling/execution"
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

// ClaimBufferForTest is the claim buffer of a Work call on a task, driven by hand: Take claims (or
// takes a claimed submission) as one of its workers would, Expire gives back what it claimed ahead
// as the call does.
type ClaimBufferForTest struct {
	w                *worker
	session          int64
	threshold        time.Duration
	declaredSettings execution.Settings
}

// NewClaimBufferForTest returns the buffer of a Work call on app/task that claims ahead more
// submissions than its workers ask for.
func (c *Client) NewClaimBufferForTest(ctx context.Context, app, task string, ahead int) (*ClaimBufferForTest, error) {
	taskID, err := c.taskID(ctx, app, task)
	if err != nil {
		return nil, err
	}
	settings, declared, err := c.declared(ctx, app, task)
	if err != nil {
		return nil, err
	}
	session, err := c.hb.sessionID(ctx)
	if err != nil {
		return nil, err
	}
	w := &worker{c: c, app: app, task: task, taskID: taskID}
	w.claims.init(ahead)
	w.claims.extra = ahead
	return &ClaimBufferForTest{w: w, session: session, threshold: settings.KeepAliveDeathThreshold, declaredSettings: declared}, nil
}

// Take returns the id of the submission a worker would run next (0: none).
func (b *ClaimBufferForTest) Take(ctx context.Context) (int64, error) {
	sub, err := b.w.claims.take(ctx, b.w, b.session, b.threshold, b.declaredSettings)
	if sub == nil {
		return 0, err
	}
	return sub.ID, err
}

// Expire gives back what was claimed ahead and not taken in time, and the rest once ctx ends.
func (b *ClaimBufferForTest) Expire(ctx context.Context) { b.w.claims.expire(ctx, b.w) }

// DeferKeyForTest defers key's submissions as a start refused by the key's rate for d does.
func (b *ClaimBufferForTest) DeferKeyForTest(key string, d time.Duration) {
	b.w.claims.deferFor(&RateLimitedError{Limit: RateOfKey, RetryAfter: d}, key)
}

package taskling

import (
	"context"
	"time"

	"github.com/taskling-go/taskling/execution"
)

// waitEnd says what ended a wait.
type waitEnd int

const (
	waitTimedOut  waitEnd = iota // the delay passed
	waitWoken                    // a wake-up arrived
	waitCancelled                // ctx ended
	waitClosed                   // the client was closed
)

// wait sleeps d, or until wake delivers (a nil wake never does), ctx ends or the client closes.
// Every waiting loop of the package (a start waiting for a slot, the scheduler, Backfill) waits
// here.
func (c *Client) wait(ctx context.Context, d time.Duration, wake <-chan struct{}) waitEnd {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return waitTimedOut
	case <-wake:
		return waitWoken
	case <-ctx.Done():
		return waitCancelled
	case <-c.closed:
		return waitClosed
	}
}

// retryDelay is how long a requester denied for the limit waits before trying again when no
// notification wakes it: at most poll, and no later than just after the earliest moment a silent
// holder may be judged dead.
func retryDelay(res execution.AcquireResult, poll time.Duration) time.Duration {
	if res.NextExpiry > 0 {
		return min(poll, res.NextExpiry+20*time.Millisecond)
	}
	return poll
}

// Package backoff computes the jittered, growing delays between retries that taskling uses
// everywhere (token transactions, heartbeats, releases, the listener, the scheduler).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay is the delay before retry attempt n (0-based): base doubled n times, capped at limit,
// with equal jitter (uniform in [d/2, d]) so that it is never zero and retries never march in
// lock-step.
func Delay(n int, base, limit time.Duration) time.Duration {
	d := base << min(max(n, 0), 30)
	if d > limit || d <= 0 {
		d = limit
	}
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits Delay(n, base, limit), or returns ctx's error if ctx ends first.
func Sleep(ctx context.Context, n int, base, limit time.Duration) error {
	t := time.NewTimer(Delay(n, base, limit))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

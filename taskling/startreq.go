package taskling

import (
	"context"
	"time"

	"github.com/taskling-go/taskling/execution"
)

// startReq is what a start asks the grant protocol for, and which operation it is: a plain
// acquisition, the claim of a cron instant (claim, with the instant), or the start of a claimed
// submission's attempt (submission). The wait loops (waitForSlot, claimWhenFree) repeat it.
type startReq struct {
	execution.AcquireRequest
	claim      *execution.ScheduleClaim
	instant    time.Time
	submission int64
	obs        *startObs // what the hooks observe of it (observe.go)
	options    string    // the options' type, for errors ("StartOptions", "SubmitOptions", …)
}

// run serves r once.
func (r startReq) run(ctx context.Context, store *execution.Store) (execution.AcquireResult, error) {
	switch {
	case r.claim != nil:
		return store.ClaimInstant(ctx, execution.ClaimInstantRequest{AcquireRequest: r.AcquireRequest, Instant: r.instant, Claim: *r.claim})
	case r.submission != 0:
		return store.StartAttempt(ctx, execution.StartAttemptRequest{AcquireRequest: r.AcquireRequest, Submission: r.submission})
	}
	return store.Acquire(ctx, r.AcquireRequest)
}

// ticket is r's ticket in the task's queue (0: none).
func (r *startReq) ticket() int64 {
	if r.Queue == nil {
		return 0
	}
	return r.Queue.Ticket
}

// setTicket records the ticket r got (0: it gave it up).
func (r *startReq) setTicket(t int64) {
	if r.Queue != nil {
		q := *r.Queue // the request's copy: a waiter's requests share no queue state
		q.Ticket = t
		r.Queue = &q
	}
}

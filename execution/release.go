package execution

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/internal/codes"
)

// ReleaseRequest returns a slot.
type ReleaseRequest struct {
	TaskID      int64
	TaskName    string
	ExecutionID int64
	TokenID     uuid.UUID
	// Failed records the execution as failed.
	Failed bool
	// ReferenceValue and Idempotent are the execution's: a successful idempotent execution's
	// claim is marked succeeded.
	ReferenceValue *string
	Idempotent     bool
	// Retry says an earlier attempt may have committed (its answer was lost): the recorded end
	// is read first, so the answer is the same.
	Retry bool
}

// Outcome is the end the release records.
func (r ReleaseRequest) outcome() int16 {
	if r.Failed {
		return codes.OutcomeFailed
	}
	return codes.OutcomeCompleted
}

// ReleaseResult is the outcome of a release.
type ReleaseResult struct {
	// LeaseLost: the slot had been taken from the execution (it was judged dead and reclaimed, or
	// its token was removed); nothing that now belongs to another execution was touched.
	LeaseLost bool
	// Offered are the tickets of the task's queue a free slot is offered to once the release
	// committed: the releasing process wakes its own waiters holding them at once.
	Offered []int64
}

// releaseQueuedKey carries an OnReleaseQueued hook in a context.
type releaseQueuedKey struct{}

type releaseQueuedHook struct {
	execution int64
	f         func()
}

// OnReleaseQueued returns ctx carrying f, which a Release of execution under it calls once its
// request is queued for a token transaction of this process (again at each retry of the Release;
// f must not block): a request of the same task queued after that is served in the same
// transaction, after the release, or in a later one, unless the release's transaction fails.
func OnReleaseQueued(ctx context.Context, execution int64, f func()) context.Context {
	return context.WithValue(ctx, releaseQueuedKey{}, releaseQueuedHook{execution: execution, f: f})
}

// queued calls o's OnReleaseQueued hook, if it has one.
func (o *op) queued() {
	if o.release == nil {
		return
	}
	if h, ok := o.ctx.Value(releaseQueuedKey{}).(releaseQueuedHook); ok && o.release.ExecutionID == h.execution {
		h.f()
	}
}

// Release runs the release transaction, together with the other token operations this process
// has queued: the token goes back only if this execution is still its grantee (identity-checked),
// the execution's end is recorded, and waiters are notified.
func (s *Store) Release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error) {
	o := &op{request: request{release: &req}, ctx: ctx}
	s.submit(o)
	if err := o.err(); err != nil {
		return ReleaseResult{}, fmt.Errorf("release execution %d of %s: %w", req.ExecutionID, req.TaskName, err)
	}
	if !req.Retry && !o.outcome.release.LeaseLost {
		s.noteReleased(req)
	}
	return o.outcome.release, nil
}

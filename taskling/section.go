package taskling

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A task's critical section is a mutex that its executions take one at a time, across every
// host: to find the work and create its blocks, say. It is the task's waiting queue reused: the
// section is a task of its own — the task's name with SectionSuffix — of limit 1, so waiters are
// served oldest first across hosts, a waiter that gives up or dies leaves the queue (Taskling
// left it at the head and blocked everyone), a holder judged dead by the slot rules loses it, and
// the release is identity-checked. It shows in the task list with its holder and waiters.

// SectionSuffix ends the name of a task's critical section; no other task name may end with it.
const SectionSuffix = " [critical section]"

// ErrSectionHeld: the execution already holds its task's critical section, or already waits for
// it (one at a time).
var ErrSectionHeld = errors.New("taskling: critical section already held by this execution")

// CriticalSection is a held critical section of a task.
type CriticalSection struct {
	owner *Execution
	held  *Execution // the section task's execution
}

// CriticalSection waits up to timeout (0: until ctx ends) for the task's critical section,
// after those already waiting on any host; the wait also ends if the execution loses its lease
// or completes. One at a time per execution (ErrSectionHeld). A wait that times out leaves the queue at once; its
// error wraps ErrLimitReached and context.DeadlineExceeded. The section is released by Release,
// by the execution's Complete, or when this process is judged dead (then its Context is
// cancelled, like the execution's).
func (e *Execution) CriticalSection(ctx context.Context, timeout time.Duration) (*CriticalSection, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("%w: CriticalSection: timeout is %s; must not be negative (0: until ctx ends)", ErrInvalidArgument, timeout)
	}
	if err := e.blockWrite(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	busy := e.section != nil || e.sectionWait
	e.sectionWait = !busy
	e.mu.Unlock()
	if busy {
		return nil, fmt.Errorf("%w: execution %d", ErrSectionHeld, e.id)
	}
	defer func() {
		e.mu.Lock()
		e.sectionWait = false
		e.mu.Unlock()
	}()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// The wait ends too when the execution can no longer hold anything (its lease is lost, or it
	// completed).
	ctx, cancelWait := context.WithCancelCause(ctx)
	defer cancelWait(nil)
	stop := context.AfterFunc(e.ctx, func() { cancelWait(context.Cause(e.ctx)) })
	defer stop()
	settings := e.declared
	settings.ConcurrencyLimit = 1
	waited := e.obs.sectionWait()
	held, err := e.c.start(ctx, e.app, e.task+SectionSuffix, &StartOptions{WaitForSlot: true,
		ReferenceValue: fmt.Sprintf("execution %d", e.id)}, startExtra{section: &settings})
	waited(err)
	if err != nil {
		if e.ctx.Err() != nil && e.active() != nil {
			return nil, fmt.Errorf("%w: execution %d completed while waiting for its critical section: %w", ErrExecutionCompleted, e.id, err)
		}
		if ctx.Err() != nil && !errors.Is(err, ErrLimitReached) { // timed out before queueing
			return nil, fmt.Errorf("%w: critical section of %s/%s: %w", ErrLimitReached, e.app, e.task, err)
		}
		return nil, err
	}
	s := &CriticalSection{owner: e, held: held}
	// Held only by an execution still running: Complete (which releases the section it finds)
	// may have run while this waited.
	e.completing.Lock()
	completed := e.completed
	if !completed {
		e.mu.Lock()
		e.section = s
		e.mu.Unlock()
	}
	e.completing.Unlock()
	if completed {
		return nil, errors.Join(fmt.Errorf("%w: execution %d completed while waiting for its critical section", ErrExecutionCompleted, e.id),
			held.Complete(context.WithoutCancel(ctx)))
	}
	return s, nil
}

func (e *Execution) heldSection() *CriticalSection {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.section
}

// Context is cancelled when the section is released or its hold can no longer be trusted
// (ErrLeaseLost), like an execution's.
func (s *CriticalSection) Context() context.Context { return s.held.Context() }

// Release gives the section to the next waiter. Releasing twice is a no-op; a section taken
// from this process after it was judged dead returns an error wrapping ErrLeaseLost.
func (s *CriticalSection) Release(ctx context.Context) error {
	err := s.held.Complete(ctx)
	s.owner.mu.Lock()
	if s.owner.section == s {
		s.owner.section = nil
	}
	s.owner.mu.Unlock()
	return err
}

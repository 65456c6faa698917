package taskling

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/backoff"
)

// MaxMessageLength is the longest checkpoint or error message stored, in bytes; longer ones are
// truncated.
const MaxMessageLength = 64 << 10

// Execution is a granted start: it holds Cost slots of its task (one unless StartOptions.Cost
// says more) until Complete, or until its lease is lost. Its methods are safe for concurrent use.
type Execution struct {
	c          *Client
	app, task  string
	taskID     int64
	id         int64
	session    int64 // the client's session it was granted under
	tokenID    uuid.UUID
	fence      int64
	startedAt  time.Time
	settings   execution.Settings
	declared   TaskSettings  // the settings it was started with, below operator overrides
	leaseTTL   time.Duration // threshold - safety margin
	header     []byte
	heartbeats bool
	reference  *string
	idempotent bool
	key        string
	cost       int
	// scheduledFor is the cron instant a scheduler run was claimed for (schedule.go).
	scheduledFor time.Time
	// submissionID and attempt: the submission this execution runs (work.go), 0 for none.
	submissionID int64
	attempt      int
	// obs is what the hooks observe of its start (observe.go); grantedAt when it was granted, on
	// this process's clock.
	obs       *startObs
	grantedAt time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu            sync.Mutex
	leaseDeadline time.Time // local monotonic; the lease is lost once it passes
	leaseTimer    *time.Timer
	frozen        bool       // tests: no heartbeat extends the lease any more
	completing    sync.Mutex // serializes Complete calls
	completed     bool
	markedFailed  bool // RecordError(…, true) was called: the execution ends failed
	endReported   bool // the hooks were told of its end (reportEnd)
	completeErr   error
	lists         []*ListBlock     // list blocks whose buffered item statuses Complete writes
	section       *CriticalSection // held, released by Complete
	sectionWait   bool             // a CriticalSection call is waiting

	// startedBlocks is set once a block attempt was started: a failure is then noted on the
	// attempts it leaves open (run.go).
	startedBlocks atomic.Bool

	// releasing is set while Complete runs: heartbeats go on (the release may wait behind
	// other transactions on the task) but a heartbeat that finds the execution ended is then
	// expected, not a lost lease.
	releasing atomic.Bool
}

func (c *Client) newExecution(app, task string, req startReq, res execution.AcquireResult, declared TaskSettings, startCtx context.Context) *Execution {
	threshold := res.Effective.Threshold()
	e := &Execution{
		c: c, app: app, task: task, taskID: req.TaskID, id: res.ExecutionID, session: req.SessionID, tokenID: res.TokenID,
		fence: res.Fence, startedAt: res.StartedAt, settings: res.Effective, declared: declared, header: req.Header,
		leaseTTL:   threshold - safetyMargin(declared, res.Effective),
		heartbeats: res.Effective.KeepAlive(),
		reference:  req.ReferenceValue, idempotent: req.Idempotent, key: req.Key, cost: max(req.Cost, 1),
	}
	if res.Attempt > 0 {
		e.submissionID, e.attempt = req.submission, res.Attempt
	}
	if e.obs = req.obs; e.obs == nil {
		e.obs = &startObs{c: c}
	}
	e.grantedAt = time.Now()
	startCtx = e.obs.granted(startCtx, app, task, Grant{ExecutionID: res.ExecutionID, FencingToken: res.Fence,
		Attempt: e.attempt, StartedAt: res.StartedAt})
	// The work's context keeps the start context's values but not its deadline: an acquire
	// timeout must not end the work.
	e.ctx, e.cancel = context.WithCancelCause(context.WithoutCancel(startCtx))
	e.leaseDeadline = res.SentAt.Add(e.leaseTTL)
	e.leaseTimer = time.AfterFunc(time.Until(e.leaseDeadline), e.expireLease)
	if e.heartbeats {
		c.hb.add(e)
	}
	return e
}

// ID is the execution's id.
func (e *Execution) ID() int64 { return e.id }

// FencingToken is strictly increasing per task across grants: pass it to a downstream store so it
// can reject writes from a holder that lost its slot to a later one.
func (e *Execution) FencingToken() int64 { return e.fence }

// StartedAt is the start time on the database clock.
func (e *Execution) StartedAt() time.Time { return e.startedAt }

// Context is the context to run the work under. It carries the values of the context given to
// StartExecution but not its deadline or cancellation. It is cancelled on Complete, and, with
// context.Cause ErrLeaseLost, as soon as the execution can no longer be sure it holds its slot:
// when its last successful heartbeat was sent longer ago than the death threshold minus the safety
// margin (on the local monotonic clock, so a paused process cancels itself the moment it resumes,
// before any other host may reclaim), or when a heartbeat finds the execution reclaimed.
//
// Err and Done check the lease deadline themselves rather than wait for the timer that cancels
// the context: a process paused past its deadline (SIGSTOP, a frozen VM, a long stall) sees its
// context cancelled on its first check after resuming, even when the goroutine doing the work runs
// before the timer's. Contexts derived from it are cancelled when it is, so check this one (or
// its Done) before a write that needs the slot.
func (e *Execution) Context() context.Context { return leaseContext{Context: e.ctx, e: e} }

// leaseContext is an execution's context as its work sees it.
type leaseContext struct {
	context.Context
	e *Execution
}

func (c leaseContext) Err() error {
	c.e.checkLease()
	return c.Context.Err()
}

func (c leaseContext) Done() <-chan struct{} {
	c.e.checkLease()
	return c.Context.Done()
}

// checkLease cancels the context with ErrLeaseLost once the lease deadline has passed, without
// waiting for the lease timer to run.
func (e *Execution) checkLease() {
	if e.ctx.Err() == nil {
		e.expireLease()
	}
}

// SubmissionID is the submission this execution runs (Work), or 0.
func (e *Execution) SubmissionID() int64 { return e.submissionID }

// Attempt is which attempt of its submission this execution is (1 for the first), or 0.
func (e *Execution) Attempt() int { return e.attempt }

// Key is the key the execution holds its slots under (StartOptions.Key; "" for none).
func (e *Execution) Key() string { return e.key }

// Cost is how many of the task's slots the execution holds (StartOptions.Cost; at least 1).
func (e *Execution) Cost() int { return e.cost }

func (e *Execution) runsSubmission() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.submissionID != 0
}

// cancelSubmission cancels the work of an execution whose submission an operator cancelled; it
// keeps its slot until it completes.
func (e *Execution) cancelSubmission(reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() == nil && e.submissionID != 0 {
		e.cancel(&errCancelled{id: e.submissionID, reason: reason})
	}
}

// Header decodes the header stored at start into v. Without a header v is left as it is.
func (e *Execution) Header(v any) error {
	if e.header == nil {
		return nil
	}
	if err := json.Unmarshal(e.header, v); err != nil {
		return fmt.Errorf("taskling: decode header of execution %d: %w", e.id, err)
	}
	return nil
}

// expireLease runs when the lease deadline passes, unless a heartbeat extended it meanwhile.
func (e *Execution) expireLease() {
	e.mu.Lock()
	if time.Now().Before(e.leaseDeadline) || e.ctx.Err() != nil {
		e.mu.Unlock()
		return
	}
	e.c.log.Warn("taskling: lease lost: no successful heartbeat in time", zap.Int64("execution", e.id), zap.String("task", e.app+"/"+e.task))
	e.c.hooks.leaseLost(e.app, e.task)
	e.cancel(ErrLeaseLost)
	e.mu.Unlock()
	e.c.hb.remove(e)
}

// loseLease cancels the execution when a heartbeat found that it no longer holds its slot.
func (e *Execution) loseLease(why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() != nil {
		return
	}
	e.c.log.Warn("taskling: lease lost: "+why, zap.Int64("execution", e.id), zap.String("task", e.app+"/"+e.task))
	e.c.hooks.leaseLost(e.app, e.task)
	e.cancel(ErrLeaseLost)
}

// extendLease moves the deadline after a successful heartbeat sent at sentAt. A heartbeat sent
// after the deadline does not count: the lease may already have been lost by then.
func (e *Execution) extendLease(sentAt time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() != nil || e.frozen || !sentAt.Before(e.leaseDeadline) {
		return
	}
	if d := sentAt.Add(e.leaseTTL); d.After(e.leaseDeadline) {
		e.leaseDeadline = d
		e.leaseTimer.Reset(time.Until(d))
	}
}

func (e *Execution) freeze() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.frozen = true
}

func (e *Execution) deadline() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leaseDeadline
}

// Complete returns the slot and records the execution as completed. It is idempotent: later
// calls return the first successful call's result. It returns an error wrapping ErrLeaseLost when
// the slot had been reclaimed by another execution (whose slot it leaves alone), or when the
// database never saw the execution take a slot handed to it (a failover lost the take: see the
// guarantees page); its slot then goes to the next waiter. A release that
// fails on a connection error or a read-only server (ErrDatabaseReadOnly) is retried until ctx
// ends or the lease would have expired anyway.
func (e *Execution) Complete(ctx context.Context) error {
	return e.finish(ctx, false, nil)
}

// finish ends the execution, failed or not; runErr is why it failed (Run's fn), for the hooks.
func (e *Execution) finish(ctx context.Context, failed bool, runErr error) (err error) {
	defer func() { e.reportEnd(failed, runErr, err) }()
	return e.release(ctx, failed)
}

// reportEnd reports the end to the hooks, once: the first call that completed the execution, or
// failed to.
func (e *Execution) reportEnd(failed bool, runErr, completeErr error) {
	e.completing.Lock()
	failed = failed || e.markedFailed
	first := !e.endReported
	e.endReported = true
	e.completing.Unlock()
	if !first {
		return
	}
	leaseLost := errors.Is(completeErr, ErrLeaseLost) || errors.Is(context.Cause(e.ctx), ErrLeaseLost)
	outcome := runOutcome(runErr, failed, leaseLost)
	e.c.hooks.ended(e.app, e.task, outcome, time.Since(e.grantedAt))
	end := End{Outcome: outcome, Err: runErr}
	if completeErr != nil && !errors.Is(completeErr, ErrLeaseLost) {
		end.Err = errors.Join(runErr, completeErr)
	} else if end.Err == nil && leaseLost {
		end.Err = ErrLeaseLost
	}
	e.obs.end(end)
}

func (e *Execution) release(ctx context.Context, failed bool) error {
	e.completing.Lock()
	defer e.completing.Unlock()
	if e.completed {
		return e.completeErr
	}
	// An execution marked failed ends failed: its idempotent reference is not marked succeeded,
	// and its submission's attempt counts as failed (the end settles both).
	failed = failed || e.markedFailed
	e.releasing.Store(true)
	defer e.releasing.Store(false)
	flushErr := e.flushLists(ctx) // before the slot goes: the items' work was done under it
	if s := e.heldSection(); s != nil {
		flushErr = errors.Join(flushErr, s.Release(ctx))
	}
	req := execution.ReleaseRequest{TaskID: e.taskID, TaskName: e.app + "/" + e.task, ExecutionID: e.id, TokenID: e.tokenID,
		Failed: failed, ReferenceValue: e.reference, Idempotent: e.idempotent}
	var res execution.ReleaseResult
	var err error
	for attempt := 0; ; attempt++ {
		res, err = e.c.store.Release(ctx, req)
		if err == nil || ctx.Err() != nil || !execution.IsUnavailable(err) || time.Now().After(e.deadline()) {
			break
		}
		// The answer was lost, not necessarily the release: the retry reads the recorded end
		// first, so that it answers the same.
		req.Retry = true
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Delay(attempt, 50*time.Millisecond, time.Second)):
		}
	}
	e.c.hb.remove(e)
	e.mu.Lock()
	e.leaseTimer.Stop()
	e.mu.Unlock()
	e.cancel(nil) // no-op if the lease was lost first: the cause stays ErrLeaseLost
	if err != nil {
		// Not completed. Its session may go on heartbeating for other executions, which keeps
		// this one alive: the release is retried in the background until it goes through (a
		// later Complete also tries again; the release is identity-checked, so both are safe).
		req.Retry = true
		e.c.releaseLater(req)
		return fmt.Errorf("taskling: complete execution %d: %w", e.id, err)
	}
	e.completed = true
	if !res.LeaseLost {
		// A slot went back: wake this process's longest waiter for it at once, without waiting
		// for the notification to come back from the database.
		e.c.notifier.PassOffered(e.taskID, res.Offered)
	}
	if res.LeaseLost {
		e.completeErr = fmt.Errorf("%w: execution %d of %s/%s no longer held its slot (reclaimed, or its start lost in a failover)", ErrLeaseLost, e.id, e.app, e.task)
	}
	if flushErr != nil {
		return errors.Join(e.completeErr, fmt.Errorf("taskling: execution %d: writing list item statuses: %w", e.id, flushErr))
	}
	return e.completeErr
}

// releaseLater retries a release that failed until it succeeds or the client is closed.
func (c *Client) releaseLater(req execution.ReleaseRequest) {
	c.live.Add(1)
	go func() {
		defer c.live.Done()
		for attempt := 0; ; attempt++ {
			select {
			case <-c.closed:
				return
			case <-time.After(backoff.Delay(attempt, 100*time.Millisecond, 5*time.Second)):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := c.store.Release(ctx, req)
			cancel()
			if err == nil {
				c.notifier.Pass(req.TaskID)
				return
			}
			c.log.Warn("taskling: returning a slot failed again; retrying", zap.Int64("execution", req.ExecutionID),
				zap.String("task", req.TaskName), zap.Int("attempt", attempt+1), zap.Error(err))
		}
	}()
}

func (e *Execution) active() error {
	e.completing.Lock()
	defer e.completing.Unlock()
	if e.completed {
		return fmt.Errorf("%w: execution %d", ErrExecutionCompleted, e.id)
	}
	return nil
}

// Checkpoint records a Checkpoint event with a message (truncated to MaxMessageLength).
func (e *Execution) Checkpoint(ctx context.Context, message string) error {
	if err := e.active(); err != nil {
		return err
	}
	return e.c.history.Checkpoint(ctx, e.id, truncate(cleanText(message)))
}

// RecordError records an Error event. markFailed also marks the execution failed: however it
// then ends (Complete, or Run's function returning nil), it ends failed — its status is Failed,
// its idempotent reference is allowed again, and a submission it runs counts the attempt as
// failed, with message as the submission's LastError.
func (e *Execution) RecordError(ctx context.Context, message string, markFailed bool) error {
	if err := e.markError(markFailed); err != nil {
		return err
	}
	return e.c.history.RecordError(ctx, e.id, truncate(cleanText(message)), markFailed)
}

// markError is active, and remembers a failure mark for the end under the same lock, so that a
// Complete either sees the mark or ran first (and then RecordError answers ErrExecutionCompleted).
// The mark counts even if the error's write fails: the caller asked for a failed end.
func (e *Execution) markError(markFailed bool) error {
	e.completing.Lock()
	defer e.completing.Unlock()
	if e.completed {
		return fmt.Errorf("%w: execution %d", ErrExecutionCompleted, e.id)
	}
	e.markedFailed = e.markedFailed || markFailed
	return nil
}

// SetProgress stores how many items are done out of total (0 = unknown), visible in the history
// and the API. done may not exceed a known total.
func (e *Execution) SetProgress(ctx context.Context, done, total int64) error {
	switch {
	case done < 0:
		return fmt.Errorf("%w: SetProgress: done is %d; must not be negative", ErrInvalidArgument, done)
	case total < 0:
		return fmt.Errorf("%w: SetProgress: total is %d; must not be negative", ErrInvalidArgument, total)
	case total > 0 && done > total:
		return fmt.Errorf("%w: SetProgress: done (%d) exceeds total (%d)", ErrInvalidArgument, done, total)
	}
	if err := e.active(); err != nil {
		return err
	}
	return e.c.history.SetProgress(ctx, e.id, done, total)
}

func truncate(s string) string {
	if len(s) <= MaxMessageLength {
		return s
	}
	cut := MaxMessageLength
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

package taskling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/store/submitstore"
)

// WorkOptions configure Work. A nil *WorkOptions means all defaults.
type WorkOptions struct {
	// Workers is how many submissions this call runs at once on this host (each in a slot of
	// the task, so the task's limit still bounds the fleet). Default 1, at most 10 000. With 5 or
	// more, Work may claim a few submissions ahead of its idle workers (docs/submissions.md).
	Workers int
	// DrainTimeout is how long running submissions may go on once Work's ctx has ended, before
	// their contexts are cancelled with ErrShuttingDown. Default 30s.
	DrainTimeout time.Duration
}

// Work runs the submissions of app/task on this host (Submit), oldest first within the highest
// priority (taking turns across keys: docs/keys.md), each as an execution of the task: it
// claims a waiting submission, waits in the task's queue for a slot (WaitForSlot, at the
// submission's priority), and runs fn under the
// granted execution as Run does — its context, lease loss, fencing token, progress and Header
// (the submission's) are the execution's; SubmissionID and Attempt say which submission and
// attempt it is.
//
// fn returning nil completes the submission, in the same transaction that returns the slot: a
// completed submission never runs again. A worker takes its next submission while that
// transaction is on its way, but its next run is granted only after it (often in the same
// transaction), so a Work call holds no more slots than Workers unless an end fails (a failed
// end is retried in the background, as Complete's is). The end's hooks may so run after the
// next run began.
//
// fn returning an error (or panicking), fn marking its execution failed (Execution.RecordError
// with markFailed, even if fn then returns nil), or its process dying at any point, sends it back
// to waiting for another attempt, until MaxAttempts attempts were made; it is then dead. An
// attempt that cannot start because of what the submission holds (a value a start refuses) costs
// an attempt too, with no execution: a submission that fails every time ends dead and never holds
// back the ones behind it.
//
// When ctx ends (or Shutdown is called) Work stops taking submissions, lets those running finish
// for up to DrainTimeout (Shutdown: its own deadline), then cancels their contexts with
// ErrShuttingDown, waits for them to return and returns nil. It returns ErrClientClosed if the
// client is closed. While the task is retired (RetireTask) its submissions wait: Work tries
// them again every 10 seconds.
func (c *Client) Work(ctx context.Context, app, task string, fn func(ctx context.Context, exec *Execution) error, opts *WorkOptions) error {
	if fn == nil {
		return fmt.Errorf("%w: fn is nil", ErrInvalidArgument)
	}
	if err := validateOwnTask(app, task); err != nil {
		return err
	}
	o := WorkOptions{}
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Workers == 0:
		o.Workers = 1
	case o.Workers < 0 || o.Workers > 10000:
		return fmt.Errorf("%w: WorkOptions.Workers is %d; want 1 to 10000 (0: 1)", ErrInvalidArgument, o.Workers)
	}
	switch {
	case o.DrainTimeout == 0:
		o.DrainTimeout = 30 * time.Second
	case o.DrainTimeout < 0:
		return fmt.Errorf("%w: WorkOptions.DrainTimeout is %s; must not be negative", ErrInvalidArgument, o.DrainTimeout)
	}
	if c.isClosed() {
		return ErrClientClosed
	}
	taskID, err := c.taskID(ctx, app, task)
	if err != nil {
		return err
	}
	w := &worker{c: c, app: app, task: task, taskID: taskID, fn: fn}
	w.claims.init(claimAhead(o.Workers))
	// stop ends the taking of submissions; runCtx, the running ones, DrainTimeout later.
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	runCtx, cancelRuns := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelRuns(nil)
	defer context.AfterFunc(c.drain.ctx, func() { cancelRuns(ErrShuttingDown) })()
	go func() {
		select {
		case <-stopCtx.Done():
		case <-c.drain.stopping:
			stop()
			return // Shutdown cancels the runs at its own deadline
		}
		t := time.NewTimer(o.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelRuns(ErrShuttingDown)
		case <-runCtx.Done():
		}
	}()
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() { w.loop(stopCtx, runCtx) })
	}
	wg.Go(func() { w.recoverLoop(stopCtx) })
	if w.claims.ahead > 0 {
		wg.Go(func() { w.claims.expire(stopCtx, w) })
	}
	closed := false
	select {
	case <-stopCtx.Done():
	case <-c.closed:
		stop()
		closed = true
	}
	wg.Wait()
	w.claims.drop(ctx, w) // a claim that raced with the end
	if closed {
		return ErrClientClosed
	}
	return nil
}

// retiredPoll is how often Work tries a retired task's submissions again.
const retiredPoll = 10 * time.Second

// worker runs one Work call's submissions.
type worker struct {
	c         *Client
	app, task string
	taskID    int64
	fn        func(ctx context.Context, exec *Execution) error
	claims    claimBuffer
}

// loop claims and runs submissions one after another until stopCtx ends.
func (w *worker) loop(stopCtx, runCtx context.Context) {
	wake, unsubscribe := w.c.notifier.SubscribeTopic(execution.SubmittedTopic(w.taskID))
	defer unsubscribe()
	failures := 0
	var ending <-chan struct{} // closed when this worker's last end is done
	defer func() {
		if ending != nil {
			<-ending
		}
	}()
	for stopCtx.Err() == nil {
		ran, err := w.next(stopCtx, runCtx, &ending)
		retired := errors.Is(err, ErrTaskRetired)
		switch {
		case retired:
			failures = 0 // its submissions wait: no warning each time
		case err != nil && stopCtx.Err() == nil:
			failures++
			w.c.log.Warn("taskling: could not take a submission; retrying", zap.String("task", w.app+"/"+w.task), zap.Error(err))
		case ran:
			failures = 0
			continue
		default:
			failures = 0
		}
		wait := w.c.maxPoll
		if failures > 0 {
			wait = min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)
		}
		if retired {
			wait = retiredPoll
		}
		select {
		case <-stopCtx.Done():
		case <-wake:
		case <-time.After(wait):
		}
	}
}

// next takes a claimed submission, waits for a slot for it and runs it; ran is false when there
// was nothing to claim. The run's end goes on in the background (ending is closed when it is
// done), so that the worker's next start can share its token transaction.
func (w *worker) next(stopCtx, runCtx context.Context, ending *<-chan struct{}) (ran bool, err error) {
	c := w.c
	if !c.drain.start() {
		<-stopCtx.Done() // Shutdown: take nothing more
		return false, nil
	}
	counted := true // the run is counted for Shutdown until its end is done
	defer func() {
		if counted {
			c.drain.done()
		}
	}()
	settings, declared, err := c.declared(stopCtx, w.app, w.task)
	if err != nil {
		return false, err
	}
	session, err := c.hb.sessionID(stopCtx)
	if err != nil {
		return false, err
	}
	// The claim lives by this session's heartbeats, kept going while this worker waits.
	c.hb.addWaiter(settings.KeepAliveInterval)
	defer c.hb.removeWaiter(settings.KeepAliveInterval)
	if wait := w.claims.pausedFor(); wait > 0 { // the task's rate has no room: claim nothing yet
		select {
		case <-stopCtx.Done():
		case <-time.After(wait):
		}
		return true, nil
	}
	sub, err := w.claims.take(stopCtx, w, session, settings.KeepAliveDeathThreshold, declared)
	if err != nil || sub == nil {
		return false, err
	}
	opts := &StartOptions{WaitForSlot: true, Priority: sub.Priority, Key: sub.Key, Cost: sub.Cost}
	if sub.Reference != nil {
		opts.ReferenceValue = *sub.Reference
	}
	exec, err := c.start(stopCtx, w.app, w.task, opts, startExtra{options: "SubmitOptions", submission: sub.ID, storedHeader: sub.Header,
		submittedAt: sub.SubmittedAt, trace: sub.Trace()})
	if err != nil && stopCtx.Err() == nil && refusesItsRow(err) {
		// Given back, it would be first in line again and fail the same way, forever: it costs
		// an attempt instead, as a failed run does, and the ones behind it go on.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(stopCtx), 5*time.Second)
		defer cancel()
		if ferr := c.subs.FailSubmissionStart(ctx, sub.ID, session, truncate(cleanText(err.Error()))); ferr != nil {
			w.unclaim(stopCtx, []submitstore.ClaimedSubmission{*sub}, session)
			return false, ferr
		}
		return true, nil
	}
	var limited *RateLimitedError
	if errors.As(err, &limited) && stopCtx.Err() == nil {
		// Deferred, not failed: no attempt is spent, and other keys' submissions are claimed
		// meanwhile.
		w.unclaim(stopCtx, []submitstore.ClaimedSubmission{*sub}, session)
		w.claims.deferFor(limited, sub.Key)
		return true, nil
	}
	if err != nil {
		w.unclaim(stopCtx, []submitstore.ClaimedSubmission{*sub}, session)
		if stopCtx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	if exec.submissionID == 0 {
		// Cancelled, or taken by another worker, while this one waited: nothing to run.
		return true, exec.Complete(context.WithoutCancel(runCtx))
	}
	counted = false // the run's end reports it done
	*ending = w.run(runCtx, exec, *ending)
	return true, nil
}

// refusesItsRow reports whether a start failed because of what the submission's own row holds
// (a value a start refuses), not for a passing reason or one every submission of the task shares
// (its settings, the database): those must not spend the attempts of the whole queue.
func refusesItsRow(err error) bool {
	return errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrInvalidSettings)
}

// unclaim gives claimed submissions back, so that they need not wait for the claim to lapse, and
// wakes the idle workers of the task, here and on other hosts.
func (w *worker) unclaim(ctx context.Context, subs []submitstore.ClaimedSubmission, session int64) {
	if len(subs) == 0 {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ids := make([]int64, len(subs))
	for i, sub := range subs {
		ids[i] = sub.ID
	}
	if err := w.c.subs.UnclaimSubmissions(uctx, ids, session); err != nil {
		w.c.log.Warn("taskling: could not give claimed submissions back; they are taken again once the claim lapses",
			zap.Int64s("submissions", ids), zap.Error(err))
	}
}

// claimAhead is the most submissions a Work call of workers workers claims beyond those its idle
// workers ask for: one for every 5 workers, up to 8. A Work call claims one batch at a time, and
// with many workers those finishing while a claim is on its way would wait for it, then claim
// again; a few claimed ahead serve them at once. It claims ahead only while workers queue for its
// claims, and gives back those no worker takes within claimedAheadFor, so that a host whose
// workers are all busy does not keep them from idle ones.
func claimAhead(workers int) int { return min(8, workers/5) }

// claimedAheadFor is how long submissions claimed ahead wait for a worker of their Work call.
const claimedAheadFor = 100 * time.Millisecond

// init makes b claim up to ahead more than its workers ask for (claimAhead).
func (b *claimBuffer) init(ahead int) {
	b.ahead = ahead
	if ahead > 0 {
		b.leftover = make(chan struct{}, 1)
	}
}

// claimBuffer claims submissions for a Work call's idle workers in one statement: as many as
// there are workers asking at that moment, and extra more.
type claimBuffer struct {
	ahead int // claimAhead
	// extra are claimed ahead by the next claim: ahead once workers queued for a claim, 0 once
	// some claimed ahead went unused.
	extra     int
	asking    atomic.Int32
	mu        sync.Mutex
	claimed   []submitstore.ClaimedSubmission
	claimedAt time.Time // when claimed was claimed
	claimedBy int64     // the session that claimed them
	// leftover tells expire that a claim left submissions no worker asked for (nil: none are
	// claimed ahead).
	leftover  chan struct{}
	lastEmpty time.Time // when a claim last found nothing
	// deferred are keys whose rate had no room for a submission, until when; paused, when the
	// task's rate had none, until when no claim is made (docs/rates.md).
	deferred map[string]time.Time
	paused   time.Time
}

// deferFor defers what a rate refused: the submission's key until its rate has room, or every
// claim until the task's has.
func (b *claimBuffer) deferFor(rl *RateLimitedError, key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	until := time.Now().Add(rl.RetryAfter)
	if rl.Limit != RateOfKey {
		b.paused = until
		return
	}
	if b.deferred == nil {
		b.deferred = map[string]time.Time{}
	}
	b.deferred[key] = until
}

// passed are the keys deferred now (b.mu held).
func (b *claimBuffer) passed(now time.Time) []string {
	var keys []string
	for k, until := range b.deferred {
		if now.Before(until) {
			keys = append(keys, k)
		} else {
			delete(b.deferred, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// pausedFor is how long no claim is made yet (0: claims go on).
func (b *claimBuffer) pausedFor() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Until(b.paused)
}

// take returns the next claimed submission, claiming a batch when none is left; nil when there
// is nothing to claim. Claimed submissions of a key deferred since are given back.
func (b *claimBuffer) take(ctx context.Context, w *worker, session int64, threshold time.Duration, declared execution.Settings) (*submitstore.ClaimedSubmission, error) {
	b.asking.Add(1)
	defer b.asking.Add(-1)
	asked := time.Now()
	b.mu.Lock()
	passedOver, by := b.dropDeferred(asked), b.claimedBy
	defer func() { w.unclaim(ctx, passedOver, by) }()
	defer b.mu.Unlock()
	if len(b.claimed) == 0 {
		if b.lastEmpty.After(asked) {
			return nil, nil // a claim that began after this worker asked found nothing
		}
		began := time.Now()
		asking := int(b.asking.Load())
		subs, err := w.c.subs.ClaimSubmissions(ctx, w.taskID, session, threshold, asking+b.extra, declared, b.passed(began))
		if asking > 1 {
			b.extra = b.ahead // workers queue for claims: claim ahead of them
		}
		if err != nil || len(subs) == 0 {
			if err == nil {
				b.lastEmpty = began
			}
			return nil, err
		}
		b.claimed, b.claimedAt, b.claimedBy = subs, time.Now(), session
	}
	sub := b.claimed[0]
	b.claimed = b.claimed[1:]
	if len(b.claimed) > 0 {
		select {
		case b.leftover <- struct{}{}:
		default: // expire knows already
		}
	}
	return &sub, nil
}

// dropDeferred removes from the buffer, and returns, the claimed submissions whose key is
// deferred at now (b.mu held).
func (b *claimBuffer) dropDeferred(now time.Time) []submitstore.ClaimedSubmission {
	if len(b.deferred) == 0 || len(b.claimed) == 0 {
		return nil
	}
	var out []submitstore.ClaimedSubmission
	kept := b.claimed[:0]
	for _, sub := range b.claimed {
		if until, ok := b.deferred[sub.Key]; ok && now.Before(until) {
			out = append(out, sub)
		} else {
			kept = append(kept, sub)
		}
	}
	b.claimed = kept
	return out
}

// expire gives back the submissions claimed ahead that no worker took within claimedAheadFor,
// and what is left once ctx ends (Work takes no more). It waits only while some are left.
func (b *claimBuffer) expire(ctx context.Context, w *worker) {
	for {
		select {
		case <-ctx.Done():
			b.drop(ctx, w)
			return
		case <-b.leftover:
		}
		for wait := claimedAheadFor; wait > 0; {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				b.drop(ctx, w)
				return
			case <-t.C:
			}
			wait = b.giveBackStale(ctx, w)
		}
	}
}

// giveBackStale gives back what is left of a claim made claimedAheadFor ago or more (claiming
// ahead stops until workers queue again), and returns how long until what is left is stale
// (0: nothing is left).
func (b *claimBuffer) giveBackStale(ctx context.Context, w *worker) time.Duration {
	b.mu.Lock()
	if len(b.claimed) == 0 {
		b.mu.Unlock()
		return 0
	}
	if age := time.Since(b.claimedAt); age < claimedAheadFor {
		b.mu.Unlock()
		return claimedAheadFor - age
	}
	stale, by := b.claimed, b.claimedBy
	b.claimed, b.extra = nil, 0
	b.mu.Unlock()
	w.unclaim(ctx, stale, by)
	return 0
}

// drop gives back what no worker took (Work ends).
func (b *claimBuffer) drop(ctx context.Context, w *worker) {
	b.mu.Lock()
	left, by := b.claimed, b.claimedBy
	b.claimed = nil
	b.mu.Unlock()
	w.unclaim(ctx, left, by)
}

// run runs one attempt under exec (the run counted for Shutdown) and returns once fn has returned
// and the attempt's end is queued for its token transaction, or done: the worker's next start,
// queued after it, is served in the same transaction or a later one, so a worker holds one slot
// at most unless an end fails, and one transaction serves an end and the next start instead of
// one each. The end goes on in the background; the channel returned is closed when it is done.
// previous is the worker's last end (nil: none), waited for before run returns.
func (w *worker) run(runCtx context.Context, exec *Execution, previous <-chan struct{}) <-chan struct{} {
	c := w.c
	fnDone, queued, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var closeFn, closeQueued sync.Once
	fn := func(ctx context.Context, exec *Execution) error {
		defer closeFn.Do(func() { close(fnDone) })
		return w.fn(ctx, exec)
	}
	endCtx := execution.OnReleaseQueued(runCtx, exec.id, func() { closeQueued.Do(func() { close(queued) }) })
	go func() {
		defer close(done)
		defer c.drain.done()
		defer closeFn.Do(func() { close(fnDone) })
		cancelled, unsubscribe := c.notifier.SubscribeTopic(execution.CancelTopic(exec.submissionID))
		defer unsubscribe()
		watchDone := make(chan struct{})
		defer close(watchDone)
		go w.watchCancel(exec, cancelled, watchDone)
		// An error or panic of fn is recorded by runStarted (RecordError marking the execution
		// failed, which is also the submission's last error) before the end settles the attempt.
		err := c.runStarted(endCtx, exec, fn)
		if err != nil && !errors.Is(err, ErrSubmissionCancelled) {
			c.log.Warn("taskling: submission attempt failed", zap.String("task", w.app+"/"+w.task),
				zap.Int64("submission", exec.submissionID), zap.Int("attempt", exec.attempt), zap.Int64("execution", exec.id), zap.Error(err))
		}
	}()
	<-fnDone
	if previous != nil {
		<-previous // a worker has two ends in flight at most
	}
	select {
	case <-queued:
	case <-done:
	}
	return done
}

// watchCancel cancels exec's run when an operator cancels its submission. A wake is not a cancel by
// itself: the listener wakes every subscriber when it reconnects (anything may have been missed),
// so the submission is read, and its run cancelled only if a cancel was requested; a read that
// fails is tried again, and the submission is read every poll interval too.
func (w *worker) watchCancel(exec *Execution, cancelled <-chan struct{}, done <-chan struct{}) {
	// As every subscriber, it also polls: a notification sent before the listener was ready (or
	// while it reconnected) is not delivered.
	poll := time.NewTicker(w.c.maxPoll)
	defer poll.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-cancelled:
		case <-poll.C:
		case <-retry:
		case <-done:
			return
		case <-exec.ctx.Done():
			return
		}
		retry = nil
		sub, err := w.c.Submission(exec.ctx, exec.submissionID)
		switch {
		case err != nil:
			retry = time.After(200 * time.Millisecond)
		case sub.CancelRequested || sub.Status == SubmissionCancelled:
			exec.cancelSubmission(sub.CancelReason)
			return
		}
	}
}

// recoverLoop settles, every few poll intervals, the task's submissions whose attempt no live
// execution runs any more (its holder died and nothing needed its slot since).
func (w *worker) recoverLoop(stopCtx context.Context) {
	c := w.c
	every := 2 * c.maxPoll
	for {
		if err := w.recover(stopCtx); err != nil && stopCtx.Err() == nil {
			c.log.Warn("taskling: could not recover submissions", zap.String("task", w.app+"/"+w.task), zap.Error(err))
		}
		select {
		case <-stopCtx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (w *worker) recover(ctx context.Context) error {
	c := w.c
	_, declared, err := c.declared(ctx, w.app, w.task)
	if err != nil {
		return err
	}
	session, err := c.hb.sessionID(ctx)
	if err != nil {
		return err
	}
	_, err = c.subs.RecoverSubmissions(ctx, w.taskID, execution.ReapRequest{Requester: execution.Requester{TaskID: w.taskID,
		TaskName: w.app + "/" + w.task, Host: c.host, SessionID: session, Declared: declared}})
	return err
}

// drainer tracks the runs of Work and RunScheduler, for Shutdown.
type drainer struct {
	mu       sync.Mutex
	n        int
	idle     chan struct{} // closed while n == 0; replaced when a run starts
	stopped  bool
	stopping chan struct{}
	ctx      context.Context // cancelled when Shutdown's deadline passes
	cancel   context.CancelCauseFunc
	once     sync.Once
}

func (d *drainer) init() {
	d.idle = make(chan struct{})
	close(d.idle)
	d.stopping = make(chan struct{})
	d.ctx, d.cancel = context.WithCancelCause(context.Background())
}

// start counts a run that is about to start; false once Shutdown was called.
func (d *drainer) start() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return false
	}
	if d.n == 0 {
		d.idle = make(chan struct{})
	}
	d.n++
	return true
}

func (d *drainer) done() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	if d.n == 0 {
		close(d.idle)
	}
}

// runContext is ctx, also cancelled with ErrShuttingDown when Shutdown's deadline passes.
func (d *drainer) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(d.ctx, func() { cancel(context.Cause(d.ctx)) })
	return rctx, func() { stop(); cancel(nil) }
}

// Shutdown drains the client for a graceful exit (on SIGTERM): Work and RunScheduler stop taking
// new runs at once, and Shutdown waits for the runs in progress to return. If ctx ends first,
// their contexts are cancelled with ErrShuttingDown, Shutdown waits for them to return (each
// records its end and returns its slot) and returns an error wrapping ErrShuttingDown and ctx's
// error. Work and RunScheduler calls return once their runs are done. Close the client after.
func (c *Client) Shutdown(ctx context.Context) error {
	d := &c.drain
	d.once.Do(func() {
		d.mu.Lock()
		d.stopped = true
		d.mu.Unlock()
		close(d.stopping)
	})
	d.mu.Lock()
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	d.cancel(ErrShuttingDown)
	for {
		d.mu.Lock()
		idle, n := d.idle, d.n
		d.mu.Unlock()
		if n == 0 {
			break
		}
		<-idle
	}
	return fmt.Errorf("%w: runs still in progress at the deadline were cancelled: %w", ErrShuttingDown, ctx.Err())
}

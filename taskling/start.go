package taskling

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/backoff"
)

// MaxReferenceValueLength is the longest ReferenceValue, in bytes.
const MaxReferenceValueLength = 2000

// MaxHeaderLength is the longest Header, in bytes of JSON.
const MaxHeaderLength = 64 << 10

// StartOptions are the options of one start. A nil *StartOptions means all defaults.
type StartOptions struct {
	// ReferenceValue is a free-form tag (a file name, a batch id), stored and searchable.
	ReferenceValue string
	// Idempotent allows at most one successful execution per (task, ReferenceValue): a start
	// returns ErrDuplicateReference while one with the same value runs or after one completed;
	// it is allowed again after a failed or dead one (failed: Run's function returned an error
	// or panicked, or Execution.RecordError marked it failed before it ended). A blocked (denied)
	// start claims nothing. Requires ReferenceValue.
	Idempotent bool
	// Header is any JSON-encodable value, stored with the execution (Execution.Header) as jsonb,
	// which reads back an equal value (keys and number formatting may differ); at most
	// MaxHeaderLength bytes once encoded, nesting at most MaxJSONDepth levels. What jsonb cannot
	// store (a \u0000 escape, an unpaired surrogate escape, a number out of numeric's range) is
	// refused (ValidateHeader).
	Header any
	// WaitForSlot blocks until a slot frees or ctx ends, instead of returning ErrLimitReached.
	// Waiters queue in the database: slots go to the oldest waiter across every host (higher
	// Priority first), and while anyone waits, a start without WaitForSlot is refused even if a
	// slot is free. A slot freed while such a start (with no idempotent reference) is first in
	// line is granted to it by the transaction that frees it; a grant or offer not taken within
	// MaxPollInterval + 1 s passes to the next waiter. A waiter is woken by a returned slot
	// (LISTEN/NOTIFY), by a timer set to the earliest moment a silent holder may be judged dead,
	// and by polling as a fallback. A wait
	// that ends with ctx leaves the queue at once, is recorded once as a Blocked execution, and
	// its error wraps ctx's cause and the reason of its last refusal: ErrLimitReached (or
	// ErrKeyLimitReached), or ErrRateLimited when a rate held it.
	WaitForSlot bool
	// Priority orders waiters (WaitForSlot): higher first, oldest first within a priority.
	Priority int
	// Key is who the run is for (a tenant, a customer): the task's KeyLimit (or the key's own
	// limit) bounds the cost its runs hold at once, and waiters of different keys take turns
	// (docs/keys.md). At most MaxKeyLength bytes, as ValidateKey checks; "" is no key, which is
	// a key like any other under a KeyLimit.
	Key string
	// Cost is how many of the task's slots the run takes: 0 means 1; at most the task's limit
	// and its key's limit, or the start fails with ErrInvalidArgument naming it.
	Cost int
}

// validateKeyCost checks a start's key and cost, naming the fields of options ("StartOptions").
func validateKeyCost(options, key string, cost int) error {
	if err := validateKey(options+".Key", key); err != nil {
		return err
	}
	if cost < 0 || cost > MaxConcurrencyLimit {
		return fmt.Errorf("%w: %s.Cost is %d; want 1 to %d (0: 1)", ErrInvalidArgument, options, cost, MaxConcurrencyLimit)
	}
	return nil
}

// startExtra is what the library's own starts pass beside their StartOptions.
type startExtra struct {
	options      string        // the options' type, for errors: "StartOptions" unless set
	submission   int64         // a claimed submission whose attempt the grant starts (work.go)
	storedHeader []byte        // the submission's header as stored: jsonb's text, passed as is (work.go)
	section      *TaskSettings // a critical section's start: these settings, not the task's (section.go)
	// The submission's creation (database clock) and trace context, for the hooks (work.go).
	submittedAt time.Time
	trace       TraceContext
}

// StartExecution asks for a slot of the task app/task and, when granted, returns the running
// Execution; call Complete when the work is done. It creates the task on first use.
//
// Errors: ErrLimitReached or ErrKeyLimitReached, and ErrRateLimited (each recorded as a Blocked
// execution), ErrTaskDisabled and ErrTaskRetired (nothing recorded), ErrDuplicateReference,
// ErrClientClosed after Close, ErrInvalidArgument / ErrInvalidSettings naming the field, or a
// database error. A serialization failure is retried with jittered backoff until ctx ends.
func (c *Client) StartExecution(ctx context.Context, app, task string, opts *StartOptions) (_ *Execution, err error) {
	defer wrapErr(&err, "start %s/%s", app, task)
	return c.start(ctx, app, task, opts, startExtra{})
}

// start is StartExecution with what the library's own starts add; the hooks observe it.
func (c *Client) start(ctx context.Context, app, task string, opts *StartOptions, x startExtra) (*Execution, error) {
	if c.isClosed() {
		return nil, ErrClientClosed
	}
	if opts == nil {
		opts = &StartOptions{}
	}
	info := StartInfo{Application: app, Task: task, Kind: StartDirect, At: time.Now(), WaitForSlot: opts.WaitForSlot,
		Priority: opts.Priority, Key: opts.Key, Cost: max(opts.Cost, 1), SubmissionID: x.submission, SubmissionTrace: x.trace,
		SubmittedAt: x.submittedAt}
	if x.submission != 0 {
		info.Kind = StartAttempt
	}
	ctx, obs := c.observe(ctx, info, x.section == nil)
	e, err := c.request(ctx, app, task, opts, x, obs)
	if err != nil {
		obs.failed(err)
	}
	return e, err
}

// request asks for a slot for start.
func (c *Client) request(ctx context.Context, app, task string, opts *StartOptions, x startExtra, obs *startObs) (*Execution, error) {
	validate := validateOwnTask
	if x.section != nil {
		validate = validateTask
	}
	if err := validate(app, task); err != nil {
		return nil, err
	}
	if x.options == "" {
		x.options = "StartOptions"
	}
	if err := validateKeyCost(x.options, opts.Key, opts.Cost); err != nil {
		return nil, err
	}
	req := startReq{AcquireRequest: execution.AcquireRequest{Requester: execution.Requester{TaskName: app + "/" + task, Host: c.host},
		Idempotent: opts.Idempotent, Key: opts.Key, Cost: opts.Cost}, submission: x.submission, obs: obs, options: x.options}
	var err error
	if opts.ReferenceValue != "" {
		if err := validateText("StartOptions.ReferenceValue", opts.ReferenceValue, MaxReferenceValueLength); err != nil {
			return nil, err
		}
		req.ReferenceValue = &opts.ReferenceValue
	} else if opts.Idempotent {
		return nil, fmt.Errorf("%w: StartOptions.Idempotent needs a StartOptions.ReferenceValue", ErrInvalidArgument)
	}
	// A stored header is jsonb's own text, whose spaces and expanded numbers may make it longer
	// than the header submitted: it goes on as it is.
	if req.Header = x.storedHeader; req.Header == nil {
		if req.Header, err = encodeHeader("StartOptions.Header", opts.Header); err != nil {
			return nil, err
		}
	}
	settings, declared, err := c.declared(ctx, app, task)
	if x.section != nil {
		settings = *x.section
		declared, err = settings.toStore("settings of " + app + "/" + task)
	}
	if err != nil {
		return nil, err
	}
	req.Declared = declared
	if req.TaskID, err = c.taskID(ctx, app, task); err != nil {
		return nil, err
	}
	c.noteDeclaration(ctx, req)
	if req.SessionID, err = c.hb.sessionID(ctx); err != nil {
		return nil, err
	}
	if !opts.WaitForSlot {
		req.RecordDenial = true
		res, err := c.acquire(ctx, app, task, req)
		if err != nil {
			return nil, err
		}
		return c.newExecution(app, task, req, res, settings, ctx), nil
	}
	// A plain start, or a submission's (its take starts the attempt), takes a slot granted to its
	// ticket directly (protocol 4); the others need their grant's own transaction (a reference's
	// claim, a section's).
	req.Queue = &execution.Queue{Priority: opts.Priority, OfferWindow: c.maxPoll + time.Second,
		Direct: !opts.Idempotent && x.section == nil}
	return c.waitForSlot(ctx, app, task, req, settings)
}

// acquire runs one acquisition and turns a denial into its error.
func (c *Client) acquire(ctx context.Context, app, task string, req startReq) (execution.AcquireResult, error) {
	began := time.Now()
	res, err := req.run(ctx, c.store)
	c.hooks.acquireDone(app, task, time.Since(began))
	if err != nil {
		return res, err
	}
	var retired *Retirement
	if res.Denied == execution.DeniedDisabled {
		// Retiring disables the task in its row, so that every host refuses it: which of the two
		// it is, is read now, off the token transaction, on this path only.
		if retired, err = c.admin.Retired(ctx, req.TaskID); err != nil {
			return res, err
		}
	}
	c.settled(app, task, req, res, retired != nil)
	if d := res.ConflictingDeclaration; d != nil {
		c.noteDispute(req, *d)
		c.log.Warn("taskling: hosts declare different concurrency limits for one task; the last requester's limit is in force unless an operator override is set",
			zap.String("task", req.TaskName), zap.String("host", req.Host), zap.Int("limit", req.Declared.ConcurrencyLimit),
			zap.String("other_host", d.Host), zap.Int("other_limit", d.Limit))
	}
	switch res.Denied {
	case execution.DeniedDisabled:
		if r := retired; r != nil {
			return res, fmt.Errorf("%w: %s (retired by %s at %s)", ErrTaskRetired, req.TaskName, r.By, r.At.UTC().Format(time.RFC3339))
		}
		return res, fmt.Errorf("%w: %s", ErrTaskDisabled, req.TaskName)
	case execution.DeniedDuplicate:
		if res.ExecutionID == 0 { // a WaitForSlot start records no denial
			return res, fmt.Errorf("%w: %s reference %q", ErrDuplicateReference, req.TaskName, *req.ReferenceValue)
		}
		return res, fmt.Errorf("%w: %s reference %q (attempt recorded as execution %d)", ErrDuplicateReference, req.TaskName, *req.ReferenceValue, res.ExecutionID)
	case execution.DeniedLimit, execution.DeniedKeyLimit:
		return res, limitError(req, res)
	case execution.DeniedRate, execution.DeniedKeyRate:
		if res.Unfit != nil {
			return res, limitError(req, res)
		}
		return res, rateError(req, res)
	}
	return res, nil
}

// rateReason is the denial reason of a rate's refusal.
func rateReason(err error) DenyReason {
	var rl *RateLimitedError
	if errors.As(err, &rl) && rl.Limit == RateOfKey {
		return DenyKeyRate
	}
	return DenyRate
}

// rateError is the error of a start a rate refused.
func rateError(req startReq, res execution.AcquireResult) error {
	e := &RateLimitedError{Task: req.TaskName, Key: req.Key, Limit: RateOfTask, Rate: Rate(res.Rate), RetryAfter: res.RetryAfter, Recorded: res.ExecutionID}
	if res.Denied == execution.DeniedKeyRate {
		e.Limit = RateOfKey
	}
	return e
}

// limitError is the error of a start denied by the task's limit or its key's, or refused for a
// cost above one of them: ErrInvalidArgument naming the cost when the start was new, else (the
// limit was lowered below a queued ticket's cost) ErrLimitReached naming the limit.
func limitError(req startReq, res execution.AcquireResult) error {
	recorded := ""
	if res.ExecutionID != 0 {
		recorded = fmt.Sprintf(" (attempt recorded as execution %d)", res.ExecutionID)
	}
	if u := res.Unfit; u != nil {
		limit := fmt.Sprintf("the task's limit %d", u.Value)
		sentinel := ErrLimitReached
		switch u.Limit {
		case execution.UnfitKey:
			limit, sentinel = fmt.Sprintf("the limit %d of key %q", u.Value, req.Key), ErrKeyLimitReached
		case execution.UnfitRate:
			limit, sentinel = fmt.Sprintf("the burst %d of the task's rate", u.Value), ErrRateLimited
		case execution.UnfitKeyRate:
			limit, sentinel = fmt.Sprintf("the burst %d of key %q's rate", u.Value, req.Key), ErrRateLimited
		}
		if req.ticket() == 0 {
			return fmt.Errorf("%w: %s.Cost is %d; above %s of %s", ErrInvalidArgument, req.options, u.Cost, limit, req.TaskName)
		}
		return fmt.Errorf("%w: %s: cost %d no longer fits %s (lowered while it waited)", sentinel, req.TaskName, u.Cost, limit)
	}
	if res.Denied == execution.DeniedKeyLimit {
		return fmt.Errorf("%w: %s: key %q is at its limit %d%s", ErrKeyLimitReached, req.TaskName, req.Key, res.KeyLimit, recorded)
	}
	return fmt.Errorf("%w: %s has %d slots in use%s", ErrLimitReached, req.TaskName, res.Effective.ConcurrencyLimit, recorded)
}

func (c *Client) waitForSlot(ctx context.Context, app, task string, req startReq, settings TaskSettings) (*Execution, error) {
	wake, unsubscribe := c.notifier.Subscribe(req.TaskID)
	granted := false
	defer func() {
		// A waiter that got its slot wakes nobody: a slot offered to the next ticket is
		// announced to that ticket's waiter. One that gave up may have been offered one.
		if !granted {
			c.notifier.Pass(req.TaskID)
		}
	}()
	defer unsubscribe()
	c.hb.addWaiter(settings.KeepAliveInterval) // the session, so the ticket, stays alive
	defer c.hb.removeWaiter(settings.KeepAliveInterval)
	defer func() {
		if !granted {
			c.leave(ctx, req) // whatever ended the wait, the ticket must not hold the line
		}
	}()
	poll := 50 * time.Millisecond
	var lastErr error
	var queued queuedTicket
	for {
		if queued.direct {
			e, err := c.takeHandoff(ctx, app, task, req, queued, settings)
			switch {
			case err == nil:
				granted = true
				return e, nil
			case !errors.Is(err, execution.ErrNotHandedOff):
				// Whether it took the slot is unknown: give the ticket and whatever it holds back
				// (retried until done), and wait on with a new one.
				c.giveBack(req)
				req.setTicket(0)
				queued = queuedTicket{}
			}
		}
		sent := time.Now()
		res, err := c.acquire(ctx, app, task, req)
		if err == nil {
			granted = true
			return c.newExecution(app, task, req, res, settings, ctx), nil
		}
		if res.Unfit != nil { // its cost exceeds a limit: waiting cannot help
			if req.ticket() != 0 {
				req.setTicket(0) // the decision dropped it
				return nil, c.recordUnfit(ctx, app, task, req, res, err)
			}
			return nil, err
		}
		if res.Ticket != 0 {
			req.obs.queue(res.QueuedAt, res.Position)
		}
		if res.Ticket != 0 && res.Ticket != req.ticket() {
			req.setTicket(res.Ticket)
			queued.since = sent
			c.notifier.SetTicket(wake, res.Ticket) // woken only when a slot is offered to it
		}
		if res.Ticket != 0 {
			queued.direct, queued.effective = res.Direct, res.Effective
		}
		if res.HandedOff {
			continue // a slot is granted to the ticket: take it
		}
		wait := min(poll, c.maxPoll)
		if req.ticket() != 0 && c.notifier.Listening() {
			// Every event that could let it in is announced to a ticket (a slot offered or
			// granted to it, the task's overrides changed, the listener reconnected), or timed
			// (a holder's expiry): polling is only the fallback, and each poll takes the task
			// row's lock that releases wait for.
			wait = max(wait, c.maxPoll/2)
		}
		switch {
		case errors.Is(err, ErrLimitReached):
			wait = retryDelay(res, wait)
		case errors.Is(err, ErrRateLimited) && req.submission != 0:
			// Work defers the submission rather than hold its claim while the rate has no room.
			c.denied(req, app, task, rateReason(err))
			return nil, err
		case errors.Is(err, ErrRateLimited):
			// No release wakes it: its next attempt is timed for when the rate has room.
			wait = max(res.RetryAfter+time.Millisecond, time.Millisecond)
		case ctx.Err() != nil:
			return nil, c.recordGaveUp(ctx, app, task, req, lastErr)
		case execution.IsUnavailable(err):
			// The database is away, or read-only until a failover completes: keep waiting, as
			// the caller asked, and retry.
		default:
			return nil, err
		}
		lastErr = err
		switch c.wait(ctx, wait, wake) {
		case waitTimedOut:
			poll *= 2
		case waitClosed:
			return nil, ErrClientClosed
		case waitCancelled:
			c.leave(ctx, req) // at once, before recording
			req.setTicket(0)
			return nil, c.recordGaveUp(ctx, app, task, req, lastErr)
		}
	}
}

// queuedTicket is what a waiter knows of its ticket.
type queuedTicket struct {
	direct    bool               // a slot freed for it is granted to it directly
	since     time.Time          // before the attempt that queued it: earlier than any grant to it
	effective execution.Settings // the settings in force at its last attempt
}

// takeHandoff takes the slot granted to req's direct ticket, if there is one.
func (c *Client) takeHandoff(ctx context.Context, app, task string, req startReq, q queuedTicket, settings TaskSettings) (*Execution, error) {
	began := time.Now()
	res, err := c.store.TakeHandoff(ctx, execution.TakeHandoffRequest{Requester: req.Requester, Ticket: req.ticket(), Submission: req.submission,
		ReferenceValue: req.ReferenceValue, Header: req.Header, Effective: q.effective})
	if err != nil {
		return nil, err
	}
	c.hooks.acquireDone(app, task, time.Since(began))
	c.settled(app, task, req, res, false)
	// The holder lives by its session's heartbeat from its grant, which came after the ticket
	// was queued: its lease runs from the later of that and the session's last renewal.
	res.SentAt = q.since
	if r := c.hb.renewedSince(req.SessionID); r.After(res.SentAt) {
		res.SentAt = r
	}
	return c.newExecution(app, task, req, res, settings, ctx), nil
}

// giveBack gives req's ticket back with whatever it holds (a slot granted to it, or the execution
// a take whose outcome is unknown started), in the background, retrying until it is done, the
// client closes, or giveBackFor passes: a slot held by this process's live session would
// otherwise stay held as long as the process runs.
func (c *Client) giveBack(req startReq) {
	leave := execution.LeaveRequest{Requester: req.Requester, Ticket: req.ticket()}
	until := time.Now().Add(giveBackFor)
	c.live.Add(1)
	go func() {
		defer c.live.Done()
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := c.store.Leave(ctx, leave)
			cancel()
			if err == nil || time.Now().After(until) {
				if err != nil {
					c.log.Warn("taskling: could not give back a ticket whose take's outcome is unknown", zap.String("task", req.TaskName), zap.Error(err))
				}
				return
			}
			select {
			case <-c.closed:
				return
			case <-time.After(backoff.Delay(attempt, 100*time.Millisecond, 5*time.Second)):
			}
		}
	}()
}

// giveBackFor bounds giveBack's retries.
const giveBackFor = 3 * time.Minute

// leave removes req's ticket from the task's queue, if it has one. A leave that fails (the
// database away) is retried in the background as a give back: a ticket left behind holds its
// key's line until it is offered and the offer lapses, or until its session stops heartbeating.
func (c *Client) leave(ctx context.Context, req startReq) {
	if req.ticket() == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.store.Leave(lctx, execution.LeaveRequest{Requester: req.Requester, Ticket: req.ticket()}); err != nil {
		c.log.Warn("taskling: could not leave the queue for a slot; retrying in the background", zap.String("task", req.TaskName), zap.Error(err))
		c.giveBack(req)
	}
}

// denied reports a denial to the hooks and to the start's observation, so that its trace ends
// with the same reason the metrics count.
func (c *Client) denied(req startReq, app, task string, reason DenyReason) {
	c.hooks.denied(app, task, reason)
	req.obs.deniedFor(reason)
}

// recordUnfit records, once, as a Blocked execution, a wait ended because a limit was lowered below
// its cost, and returns err (which says so).
func (c *Client) recordUnfit(ctx context.Context, app, task string, req startReq, res execution.AcquireResult, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, rerr := c.store.RecordBlocked(rctx, req.AcquireRequest, cleanText(err.Error())); rerr != nil {
		c.log.Warn("taskling: could not record a blocked attempt", zap.String("task", req.TaskName), zap.Error(rerr))
	}
	reason := map[string]DenyReason{execution.UnfitKey: DenyKeyLimit, execution.UnfitRate: DenyRate, execution.UnfitKeyRate: DenyKeyRate}[res.Unfit.Limit]
	if reason == "" {
		reason = DenyLimit
	}
	c.denied(req, app, task, reason)
	return err
}

// recordGaveUp records a wait that ended with its context, once, as a Blocked execution.
func (c *Client) recordGaveUp(ctx context.Context, app, task string, req startReq, lastErr error) error {
	cause := context.Cause(ctx)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	id, err := c.store.RecordBlocked(rctx, req.AcquireRequest, "gave up waiting for a slot: "+cause.Error())
	if err != nil {
		c.log.Warn("taskling: could not record a blocked attempt", zap.String("task", req.TaskName), zap.Error(err))
	}
	recorded := ""
	if id != 0 {
		recorded = fmt.Sprintf(" (attempt recorded as execution %d)", id)
	}
	if errors.Is(lastErr, ErrRateLimited) {
		c.denied(req, app, task, rateReason(lastErr))
		return fmt.Errorf("%w: %s: gave up waiting%s: %w", ErrRateLimited, req.TaskName, recorded, cause)
	}
	if errors.Is(lastErr, ErrLimitReached) || lastErr == nil {
		reason, sentinel := DenyLimit, ErrLimitReached
		if errors.Is(lastErr, ErrKeyLimitReached) {
			reason, sentinel = DenyKeyLimit, ErrKeyLimitReached
		}
		c.denied(req, app, task, reason)
		return fmt.Errorf("%w: %s: gave up waiting%s: %w", sentinel, req.TaskName, recorded, cause)
	}
	return fmt.Errorf("taskling: %s: gave up waiting: %w (last error: %w)", req.TaskName, cause, lastErr)
}

// settled follows a committed acquisition or take: its hooks, the task's keep settings, and the
// cleanup loop (started by a client's first start).
func (c *Client) settled(app, task string, req startReq, res execution.AcquireResult, retired bool) {
	c.report(app, task, req, res, retired)
	c.startCleaner()
}

// report calls the hooks for a committed acquisition.
func (c *Client) report(app, task string, req startReq, res execution.AcquireResult, retired bool) {
	if len(res.Reclaimed) > 0 { // set only when the reclaims were committed
		c.hooks.reclaimed(app, task, len(res.Reclaimed))
	}
	switch {
	case res.Denied == execution.NotDenied:
		c.hooks.granted(app, task)
	case res.Unfit != nil && req.ticket() == 0: // a cost above a limit: ErrInvalidArgument
	case res.Denied == execution.DeniedDisabled && retired:
		c.denied(req, app, task, DenyRetired)
	case res.Denied == execution.DeniedDisabled:
		c.denied(req, app, task, DenyDisabled)
	case res.Denied == execution.DeniedDuplicate:
		c.denied(req, app, task, DenyDuplicate)
	case req.RecordDenial && res.Denied == execution.DeniedKeyLimit:
		c.denied(req, app, task, DenyKeyLimit)
	case req.RecordDenial && res.Denied == execution.DeniedRate:
		c.denied(req, app, task, DenyRate)
	case req.RecordDenial && res.Denied == execution.DeniedKeyRate:
		c.denied(req, app, task, DenyKeyRate)
	case req.RecordDenial: // a waiter's limit denials are counted when it gives up
		c.denied(req, app, task, DenyLimit)
	}
}

// ValidateHeader checks a header as StartExecution and Submit do: JSON-encodable, at most
// MaxHeaderLength bytes once encoded, nesting at most MaxJSONDepth levels, and storable by
// PostgreSQL's jsonb (no \u0000 escape, no unpaired surrogate escape, numbers within numeric's
// range). The error wraps
// ErrInvalidArgument and names field. Tools use it to reject a bad header before submitting.
func ValidateHeader(field string, v any) error {
	_, err := encodeHeader(field, v)
	return err
}

// encodeHeader encodes a header (nil for none), at most MaxHeaderLength bytes and MaxJSONDepth
// levels of JSON that jsonb can store.
func encodeHeader(field string, v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	return encodeJSON(field, v, MaxHeaderLength)
}

// validateText checks a free-form string stored in a text column: valid UTF-8, no NUL byte
// (PostgreSQL text cannot hold one), at most max bytes.
func validateText(field, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%w: %s is %d bytes; at most %d allowed", ErrInvalidArgument, field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidArgument, field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalidArgument, field)
	}
	return nil
}

// cleanText makes a message storable: invalid UTF-8 and NUL bytes are replaced, not rejected, so
// that an error message is never lost.
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// disputeEvery is how often at most a host records, per task, that its declaration replaced
// another host's different one.
const disputeEvery = 5 * time.Second

// noteDispute records, in the background and at most every disputeEvery per task, that this
// host's declaration replaced another host's different limit: operators see the disagreement.
func (c *Client) noteDispute(req startReq, other execution.Declaration) {
	now := time.Now()
	if last, ok := c.disputes.Load(req.TaskID); ok && now.Sub(last.(time.Time)) < disputeEvery {
		return
	}
	c.disputes.Store(req.TaskID, now)
	c.live.Add(1)
	go func() {
		defer c.live.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.admin.RecordDispute(ctx, req.TaskID, other, req.Declared.ConcurrencyLimit, req.Host); err != nil {
			c.log.Debug("taskling: could not record a disagreement between hosts' limits", zap.String("task", req.TaskName), zap.Error(err))
		}
	}()
}

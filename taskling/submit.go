package taskling

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/store/submitstore"
)

// SubmissionStatuses lists every status, in lifecycle order.
var SubmissionStatuses = [...]SubmissionStatus{SubmissionWaiting, SubmissionInProgress, SubmissionCompleted, SubmissionDead, SubmissionCancelled}

var submissionStatusCodes = map[SubmissionStatus]int16{
	SubmissionWaiting: codes.SubmissionWaiting, SubmissionInProgress: codes.SubmissionInProgress,
	SubmissionCompleted: codes.SubmissionCompleted, SubmissionDead: codes.SubmissionDead,
	SubmissionCancelled: codes.SubmissionCancelled,
}

// ParseSubmissionStatus parses a status name ("waiting", "in_progress", …).
func ParseSubmissionStatus(s string) (SubmissionStatus, error) {
	if _, ok := submissionStatusCodes[SubmissionStatus(s)]; ok {
		return SubmissionStatus(s), nil
	}
	return "", fmt.Errorf("%w: submission status %q; want one of %v", ErrInvalidArgument, s, SubmissionStatuses)
}

// DefaultMaxAttempts is a submission's MaxAttempts when none is given.
const DefaultMaxAttempts = 3

// MaxMaxAttempts is the largest MaxAttempts allowed.
const MaxMaxAttempts = 1000

// SubmitOptions are the options of a submission. A nil *SubmitOptions means all defaults.
type SubmitOptions struct {
	// Header is any JSON-encodable value (at most MaxHeaderLength bytes once encoded, nesting at
	// most MaxJSONDepth levels, storable by jsonb: see StartOptions.Header), handed to every
	// attempt (Execution.Header) as stored.
	Header any
	// ReferenceValue makes the submission idempotent: a later Submit of the task with the same
	// value stores nothing and returns the first one's id, whatever its status. It is also the
	// attempts' ReferenceValue.
	ReferenceValue string
	// Priority orders waiting submissions: higher first, oldest first within a priority. It is
	// also the priority of the attempt's wait for a slot.
	Priority int
	// MaxAttempts bounds how many times it is run: an attempt that fails or whose worker dies
	// sends it back to waiting until MaxAttempts attempts were made; it is then dead.
	// Default DefaultMaxAttempts, at most MaxMaxAttempts.
	MaxAttempts int
	// TraceContext is the W3C trace context stored with the submission, to which each attempt's
	// trace links (see package tasklingotel). Zero: the one a hook reads from Submit's context
	// (Hooks.TraceContext), if any. Checked by ValidateTraceContext.
	TraceContext TraceContext
	// Key and Cost are the attempts' (StartOptions.Key, StartOptions.Cost): Work claims only
	// submissions whose key has room, and their waits take turns across keys (docs/keys.md). An
	// attempt whose cost exceeds the task's or its key's limit costs an attempt, refused naming
	// SubmitOptions.Cost.
	Key  string
	Cost int
}

// Submit stores a request to run app/task and returns its id at once; its status is waiting
// until a Work loop on any host takes it. It creates the task on first use.
func (c *Client) Submit(ctx context.Context, app, task string, opts *SubmitOptions) (int64, error) {
	sub, err := c.newSubmission(ctx, app, task, opts)
	if err != nil {
		return 0, err
	}
	id, _, err := submitstore.InsertSubmission(ctx, c.pool, sub)
	if err != nil {
		return 0, fmt.Errorf("taskling: submit %s/%s: %w", app, task, err)
	}
	return id, nil
}

// SubmitTx is Submit inside the caller's transaction tx: the submission exists if and only if
// tx commits, and workers hear of it on commit. (The task's row, created on first use, is
// committed on its own.) Under REPEATABLE READ or SERIALIZABLE, a duplicate ReferenceValue
// submitted concurrently by a transaction tx cannot see is an error; under READ COMMITTED it
// returns that submission's id.
func (c *Client) SubmitTx(ctx context.Context, tx pgx.Tx, app, task string, opts *SubmitOptions) (int64, error) {
	if tx == nil {
		return 0, fmt.Errorf("%w: tx is nil", ErrInvalidArgument)
	}
	sub, err := c.newSubmission(ctx, app, task, opts)
	if err != nil {
		return 0, err
	}
	id, _, err := submitstore.InsertSubmission(ctx, tx, sub)
	if err != nil {
		return 0, fmt.Errorf("taskling: submit %s/%s: %w", app, task, err)
	}
	return id, nil
}

func (c *Client) newSubmission(ctx context.Context, app, task string, opts *SubmitOptions) (submitstore.NewSubmission, error) {
	var sub submitstore.NewSubmission
	if c.isClosed() {
		return sub, ErrClientClosed
	}
	if err := validateOwnTask(app, task); err != nil {
		return sub, err
	}
	if opts == nil {
		opts = &SubmitOptions{}
	}
	if err := validateKeyCost("SubmitOptions", opts.Key, opts.Cost); err != nil {
		return sub, err
	}
	sub.Priority, sub.MaxAttempts, sub.Key, sub.Cost = opts.Priority, opts.MaxAttempts, opts.Key, max(opts.Cost, 1)
	switch {
	case sub.MaxAttempts == 0:
		sub.MaxAttempts = DefaultMaxAttempts
	case sub.MaxAttempts < 0 || sub.MaxAttempts > MaxMaxAttempts:
		return sub, fmt.Errorf("%w: SubmitOptions.MaxAttempts is %d; want 1 to %d (0: %d)", ErrInvalidArgument, sub.MaxAttempts, MaxMaxAttempts, DefaultMaxAttempts)
	}
	if opts.Priority < -1<<31 || opts.Priority > 1<<31-1 {
		return sub, fmt.Errorf("%w: SubmitOptions.Priority is %d; it must fit in 32 bits", ErrInvalidArgument, opts.Priority)
	}
	if opts.ReferenceValue != "" {
		if err := validateText("SubmitOptions.ReferenceValue", opts.ReferenceValue, MaxReferenceValueLength); err != nil {
			return sub, err
		}
		sub.ReferenceValue = &opts.ReferenceValue
	}
	var err error
	if sub.Header, err = encodeHeader("SubmitOptions.Header", opts.Header); err != nil {
		return sub, err
	}
	if sub.Trace = opts.TraceContext; sub.Trace.IsZero() {
		sub.Trace = c.hooks.traceContext(ctx)
	}
	if err := ValidateTraceContext("SubmitOptions.TraceContext", sub.Trace); err != nil {
		return sub, err
	}
	id, err := c.taskID(ctx, app, task)
	if err != nil {
		return sub, err
	}
	sub.TaskID = id
	return sub, nil
}

// Submission returns submission id, or an error wrapping ErrNotFound.
func (c *Client) Submission(ctx context.Context, id int64) (_ Submission, err error) {
	defer wrapErr(&err, "submission %d", id)
	sub, ok, err := c.subs.Submission(ctx, id)
	if err != nil {
		return Submission{}, err
	}
	if !ok {
		return Submission{}, notFound(fmt.Sprintf("submission %d", id))
	}
	return sub, nil
}

// SubmissionFilter selects submissions. A nil *SubmissionFilter means all, newest first, up to
// 50.
type SubmissionFilter struct {
	// Status selects one status; "" means any. Waiting ones come in queue order.
	Status SubmissionStatus
	// Before pages: only ids below it (0: from the newest).
	Before int64
	// Limit is at most 1000; 0 means 50.
	Limit int
}

// Submissions lists the submissions of app/task; an unknown task has none.
func (c *Client) Submissions(ctx context.Context, app, task string, filter *SubmissionFilter) (_ []Submission, err error) {
	defer wrapErr(&err, "submissions of %s/%s", app, task)
	if err := validateTask(app, task); err != nil {
		return nil, err
	}
	f := SubmissionFilter{}
	if filter != nil {
		f = *filter
	}
	var code int16
	if f.Status != "" {
		if _, err := ParseSubmissionStatus(string(f.Status)); err != nil {
			return nil, fmt.Errorf("SubmissionFilter.Status: %w", err)
		}
		code = submissionStatusCodes[f.Status]
	}
	switch {
	case f.Limit == 0:
		f.Limit = 50
	case f.Limit < 0 || f.Limit > 1000:
		return nil, fmt.Errorf("%w: SubmissionFilter.Limit is %d; want 1 to 1000 (0: 50)", ErrInvalidArgument, f.Limit)
	}
	if f.Before < 0 {
		return nil, fmt.Errorf("%w: SubmissionFilter.Before is %d", ErrInvalidArgument, f.Before)
	}
	id, ok, err := c.store.FindTask(ctx, app, task)
	if err != nil || !ok {
		return nil, err
	}
	return c.subs.Submissions(ctx, id, submitstore.SubmissionFilter{Status: code, Before: f.Before, Limit: f.Limit})
}

// SubmissionAttempts lists the executions that ran submission id, first attempt first.
func (c *Client) SubmissionAttempts(ctx context.Context, id int64) (_ []int64, err error) {
	defer wrapErr(&err, "attempts of submission %d", id)
	return c.subs.SubmissionAttempts(ctx, id)
}

// MaxCancelReasonLength is the longest cancel reason, in bytes.
const MaxCancelReasonLength = 2000

// CancelSubmission cancels submission id (see Operations.CancelSubmission), recorded as made by
// "library@" and this client's host name.
func (c *Client) CancelSubmission(ctx context.Context, id int64, reason string) (Submission, error) {
	return c.As(Operator{}).CancelSubmission(ctx, id, reason)
}

// CancelSubmissionBy is CancelSubmission recorded as made by the operator named by ("" means
// "library@" and this client's host name).
//
// Deprecated: use c.As(Operator{Name: by}).CancelSubmission(ctx, id, reason), which records the
// same.
func (c *Client) CancelSubmissionBy(ctx context.Context, id int64, reason, by string) (Submission, error) {
	o, err := c.asBy("by", by)
	if err != nil {
		return Submission{}, err
	}
	return o.CancelSubmission(ctx, id, reason)
}

// errCancelled is the cause of a cancelled submission's context.
type errCancelled struct {
	id     int64
	reason string
}

func (e *errCancelled) Error() string {
	if e.reason == "" {
		return fmt.Sprintf("taskling: submission %d cancelled by an operator", e.id)
	}
	return fmt.Sprintf("taskling: submission %d cancelled by an operator: %s", e.id, e.reason)
}

func (e *errCancelled) Is(target error) bool { return target == ErrSubmissionCancelled }

// SubmissionCounts counts every task's submissions by status, fleet-wide (tasks without
// submissions are left out): what the metrics' taskling_submissions gauge shows. It reads a tally
// that the database keeps as submissions change (migration 0021), whose size follows the changes
// since it was last compacted, not the submissions kept; it compacts the tally first, at most once
// a minute per client (a compaction that fails, on a read-only server say, is left to the next).
func (c *Client) SubmissionCounts(ctx context.Context) (_ []SubmissionCount, err error) {
	defer wrapErr(&err, "count submissions")
	c.compactTally(ctx)
	return c.subs.SubmissionCounts(ctx)
}

// tallyEvery is how often at most a client compacts the submission tally.
const tallyEvery = time.Minute

// compactTally compacts the submission tally unless this client did within tallyEvery.
func (c *Client) compactTally(ctx context.Context) {
	now := time.Now()
	last := c.tallied.Load()
	if last != nil && now.Sub(*last) < tallyEvery || !c.tallied.CompareAndSwap(last, &now) {
		return
	}
	if _, err := c.subs.CompactSubmissionTally(ctx); err != nil {
		c.log.Debug("taskling: could not compact the submission tally", zap.Error(err))
	}
}

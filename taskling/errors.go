package taskling

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/store/adminstore"
)

var (
	// ErrLimitReached: the task has no slot for the start: every slot is held by a live execution,
	// or other starts are queued for one (or, just after a database failover, the task holds its
	// grants for a moment). A start without WaitForSlot is recorded as a Blocked execution.
	ErrLimitReached = errors.New("taskling: concurrency limit reached")
	// ErrKeyLimitReached: the start's key (StartOptions.Key) holds as much as its key's limit
	// allows, while the task has room. It wraps ErrLimitReached: errors.Is(err, ErrLimitReached)
	// holds for it too, and the message says which limit.
	ErrKeyLimitReached = fmt.Errorf("%w: its key's limit", ErrLimitReached)
	// ErrRateLimited: a rate (TaskSettings.Rate, or the key's) has no room for the start now. A
	// start the rate refuses at once returns a *RateLimitedError: errors.As gives RetryAfter, when
	// the start would fit, on the database clock. A WaitForSlot start that gives up while a rate
	// holds it, or whose cost no longer fits a rate's burst, wraps ErrRateLimited alone. Nothing is
	// consumed by a refused start. See docs/rates.md.
	ErrRateLimited = errors.New("taskling: rate limited")
	// ErrTaskDisabled: the task is disabled (by its settings or an operator). No execution is
	// recorded.
	ErrTaskDisabled = errors.New("taskling: task is disabled")
	// ErrTaskRetired: an operator retired the task (RetireTask): its starts are refused, and
	// nothing is written, until it is unretired. The message says by whom and when.
	ErrTaskRetired = adminstore.ErrTaskRetired
	// ErrDuplicateReference: an Idempotent start found an execution with the same reference value
	// that succeeded or is still running. A start without WaitForSlot is recorded as a Blocked
	// execution; a WaitForSlot start returns at once and records nothing.
	ErrDuplicateReference = errors.New("taskling: an execution with this reference value already succeeded or is running")
	// ErrLeaseLost: the execution can no longer be sure it holds its slot. It is the cause of
	// Execution.Context()'s cancellation, and Complete returns it when the slot had been reclaimed
	// (or a failover lost the execution's start).
	ErrLeaseLost = errors.New("taskling: lease lost")
	// ErrExecutionCompleted: the method needs an execution that has not completed.
	ErrExecutionCompleted = errors.New("taskling: execution already completed")
	// ErrInvalidSettings is wrapped by every settings validation error; the message names the field.
	ErrInvalidSettings = execution.ErrInvalidSettings
	// ErrInvalidArgument is wrapped by every other validation error (names, options); the message
	// names the argument.
	ErrInvalidArgument = errors.New("taskling: invalid argument")
	// ErrClientClosed: the Client was closed.
	ErrClientClosed = errors.New("taskling: client closed")
	// ErrUpgradeRequired: the database was migrated by a newer taskling whose grant rules this
	// binary does not know, so it refuses to grant (it still completes what it runs). The error
	// names both protocol versions; see the README's "Upgrading".
	ErrUpgradeRequired = execution.ErrUpgradeRequired
	// ErrDatabaseReadOnly: the database server refused a write because it is read-only (SQLSTATE
	// 25006: a standby, or a primary a failover demoted and left running), or no writable server
	// could be reached. The pool was reset, so the next connections are dialled anew: with a
	// multi-host URL and target_session_attrs=read-write they find the new primary. Starts that
	// wait for a slot, and releases, retry meanwhile; see the README's "Using a real server".
	ErrDatabaseReadOnly = execution.ErrDatabaseReadOnly
	// ErrSubmissionCancelled: an operator cancelled the submission this execution runs. The cause
	// of Execution.Context()'s cancellation (its message names the submission and the reason).
	ErrSubmissionCancelled = errors.New("taskling: submission cancelled")
	// ErrSubmissionFinished: the submission already completed, died or was cancelled.
	ErrSubmissionFinished = errors.New("taskling: submission already finished")
	// ErrShuttingDown: the client is draining (Shutdown, or Work's context ended) and the drain's
	// deadline passed: the cause of a run's cancelled context.
	ErrShuttingDown = errors.New("taskling: shutting down")
)

// Rates a start may be refused by (RateLimitedError.Limit).
const (
	RateOfTask = "rate"     // TaskSettings.Rate
	RateOfKey  = "key_rate" // the start's key's rate
)

// RateLimitedError is the error of a start a rate refused. It matches ErrRateLimited.
type RateLimitedError struct {
	Task  string // "app/task"
	Key   string // the start's key
	Limit string // RateOfTask or RateOfKey
	Rate  Rate   // the rate in force
	// RetryAfter is how long until the start would fit this rate, measured on the database
	// clock when it was refused (another start may take that room first).
	RetryAfter time.Duration
	// Recorded is the blocked execution recording the attempt (0: none).
	Recorded int64
}

func (e *RateLimitedError) Error() string {
	which := "its rate " + e.Rate.String()
	if e.Limit == RateOfKey {
		which = fmt.Sprintf("the rate %s of key %q", e.Rate.String(), e.Key)
	}
	recorded := ""
	if e.Recorded != 0 {
		recorded = fmt.Sprintf(" (attempt recorded as execution %d)", e.Recorded)
	}
	return fmt.Sprintf("%s: %s: %s has no room; retry after %s%s", ErrRateLimited, e.Task, which, e.RetryAfter, recorded)
}

func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// SettingsError is a settings error naming the setting at fault (Field, as TaskSettings names
// it). UpdateTaskSettings returns one for overrides that no start would accept over the declared
// settings, and a start whose declaration the overrides do not fit fails with one; its message
// says where each value comes from. It matches ErrInvalidSettings (not every error that does is a
// SettingsError).
type SettingsError = execution.SettingsError

// wrapErr gives a returned error the one prefix a user sees, "taskling: what: ", unless it has
// it already (this package's errors and sentinels do): an error from below says what failed
// without a package name of its own.
func wrapErr(err *error, format string, args ...any) {
	if *err == nil || strings.HasPrefix((*err).Error(), "taskling: ") {
		return
	}
	*err = fmt.Errorf("taskling: "+format+": %w", append(args, *err)...)
}

// Package ledger is the record the chaos tests keep of what every worker process believed and
// did: one JSON-lines file per process incarnation (and one for the nemesis), appended with one
// write(2) per event, so a record survives kill -9 of its writer and is untouched by the faults
// injected into the database and the network it observes.
//
// Times are on the database clock. Events are stamped with the writer's clock when they happen
// (a write to the database could be delayed by the very faults under test). The chaos cluster
// runs on the same host as the workers, so its clock_timestamp() reads the same system clock and
// no offset is applied; against a server elsewhere each writer applies the offset it measured
// when it started (the sample with the shortest round trip, see MeasureOffset). The start event
// records the measured offset either way.
package ledger

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is the type of a ledger event.
type Kind string

const (
	// KindStart: a worker process started (Host, PID, Offset, OffsetError).
	KindStart Kind = "start"
	// KindGrant: StartExecution returned a slot (Exec, Task, Fence, GrantedAt = the execution's
	// started_at on the DB clock, At = when StartExecution returned). Written before any work. An
	// attempt run by Work also names its Submission and Attempt (At = when the function was called).
	// In TestChaos, Isolation is the level of the client that made the start. Key and Cost are the
	// execution's (TestChaosKeys).
	KindGrant Kind = "grant"
	// KindStop: the holder stopped working (Exec, Reason, At = the last instant it worked while
	// its context was not cancelled — zero if its very first check found the context cancelled,
	// as when the process paused between the grant and StartExecution's return —, Observed =
	// when it saw the cancellation, Cause).
	KindStop Kind = "stop"
	// KindComplete: Complete returned (Exec, Result, Error).
	KindComplete Kind = "complete"
	// KindExit: the worker exited cleanly.
	KindExit Kind = "exit"

	// KindQueue: the queue for a slot of Task as the observer read it from the task row in one
	// statement (At = the statement's clock_timestamp() on the DB clock): Queue is the row's queue
	// column verbatim (tickets in grant order, see checker.ParseQueue) and Fence the row's fence,
	// which counts the task's grants, so that the grants made between two snapshots are exactly
	// those whose fences lie between theirs. Written only when the queue or the fence changed.
	KindQueue Kind = "queue"

	// Block attempts (TestChaosBlocks), each naming its Block, Attempt and execution (Exec).
	// KindBlockTake: NumericBlocks returned the attempt (From, To: the block's numbers; At = when
	// it returned). Written before the attempt is worked on.
	KindBlockTake Kind = "block_take"
	// KindBlockStart: Block.Start returned without error (At).
	KindBlockStart Kind = "block_start"
	// KindBlockStop: the worker stopped working on the attempt (At = the last instant it worked on
	// it while its execution's context was not cancelled; zero if it never did). Note names the
	// call it makes next ("complete", "fail"), or Reason says why it makes none (ReasonCancelled:
	// the context ended first; ReasonError: Start failed, Error). Written before that call.
	KindBlockStop Kind = "block_stop"
	// KindBlockEnd: Complete or Fail returned (Result: BlockCompleted, BlockFailed, BlockLost
	// for ErrBlockLost, ResultError with Error; At = when it returned).
	KindBlockEnd Kind = "block_end"

	// Critical sections (TestChaosCriticalSection), each naming the execution that asks for its
	// task's section (Exec: the owner; the section's own execution is not visible to it).
	// KindSectionWait: CriticalSection was called (At) with Timeout (0: none).
	KindSectionWait Kind = "section_wait"
	// KindSectionAcquire: CriticalSection returned the section (At = when it returned).
	KindSectionAcquire Kind = "section_acquire"
	// KindSectionGiveUp: CriticalSection returned an error (At = when; Result: SectionTimeout
	// for a wait that timed out — Note NoteNotLimitReached if its error did not wrap
	// ErrLimitReached —, SectionStopped for one the process's shutdown ended, ResultError
	// otherwise; Error).
	KindSectionGiveUp Kind = "section_give_up"
	// KindSectionStop: the holder stopped holding (At = the last instant it held the section
	// while the section's context was not cancelled, zero if never; Reason, Observed, Cause as
	// for KindStop). Written before Release is called.
	KindSectionStop Kind = "section_stop"
	// KindSectionRelease: Release returned (Result: ResultOK, ResultLeaseLost, ResultError; At).
	KindSectionRelease Kind = "section_release"

	// Nemesis events: a fault's window [At, End] on the DB clock, the process it hit (Host),
	// and details.
	KindFault Kind = "fault"
	// KindLimit: an operator override of Task's limit to Limit, committed within [At, End].
	KindLimit Kind = "limit"
	// KindIsolation: the nemesis of TestChaos switched the isolation level in force (the one
	// new starts use) to Isolation at At. Its faults name the level in force as well.
	KindIsolation Kind = "isolation"
)

// Isolation levels, as the level file of TestChaos and the ledgers name them.
const (
	IsolationReadCommitted = "read committed"
	IsolationSerializable  = "serializable"
)

// Reasons a holder stopped.
const (
	ReasonCompleted = "completed" // its work was done; Complete is called next
	ReasonLeaseLost = "lease_lost"
	ReasonCancelled = "cancelled" // the context ended for another reason (Run's own ctx)
	ReasonError     = "error"     // a block's Start failed: the attempt is left as it is
)

// Block attempt results (KindBlockEnd).
const (
	BlockCompleted = "completed"
	BlockFailed    = "failed" // failed on purpose
	BlockLost      = "lost"   // ErrBlockLost: the attempt was no longer the block's latest, or had ended
)

// Section wait results (KindSectionGiveUp).
const (
	SectionTimeout = "timeout" // the wait's timeout passed (context.DeadlineExceeded)
	SectionStopped = "stopped" // the process was stopping
	// NoteNotLimitReached notes a timeout whose error does not wrap ErrLimitReached.
	NoteNotLimitReached = "not ErrLimitReached"
)

// Complete results.
const (
	ResultOK        = "ok"
	ResultLeaseLost = "lease_lost" // Complete returned ErrLeaseLost: the identity check failed
	ResultError     = "error"
	// Work attempts: the function returned an error on purpose (the attempt fails; Work marks the
	// execution failed and the submission goes back to waiting), or returned nil without calling
	// Complete (Work completes it; its result is not seen by the function).
	ResultFailed   = "failed"
	ResultReturned = "returned"
)

// Event is one line of a ledger.
type Event struct {
	Kind Kind      `json:"kind"`
	Host string    `json:"host,omitempty"`
	At   time.Time `json:"at,omitzero"`

	// Process start.
	PID         int           `json:"pid,omitempty"`
	Offset      time.Duration `json:"offset,omitempty"`
	OffsetError time.Duration `json:"offset_error,omitempty"`

	// Holders.
	Exec      int64     `json:"exec,omitempty"`
	Task      string    `json:"task,omitempty"`
	Fence     int64     `json:"fence,omitempty"`
	GrantedAt time.Time `json:"granted_at,omitzero"`
	Waited    bool      `json:"waited,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Observed  time.Time `json:"observed,omitzero"`
	Cause     string    `json:"cause,omitempty"`
	Result    string    `json:"result,omitempty"`
	Error     string    `json:"error,omitempty"`

	// Keyed starts (grant): the execution's key and cost as StartExecution returned them
	// (Execution.Key, Execution.Cost; TestChaosKeys).
	Key  string `json:"key,omitempty"`
	Cost int    `json:"cost,omitempty"`

	// Work attempts (grant): the submission the execution runs and which attempt it is.
	Submission int64 `json:"submission,omitempty"`
	Attempt    int   `json:"attempt,omitempty"`

	// Block attempts: the block, its numbers (Attempt as well).
	Block     int64 `json:"block,omitempty"`
	BlockFrom int64 `json:"block_from,omitempty"`
	BlockTo   int64 `json:"block_to,omitempty"`

	// Critical sections: a wait's timeout.
	Timeout time.Duration `json:"timeout,omitempty"`

	// Queue observer (Task, Fence, At as well).
	Queue string `json:"queue,omitempty"`

	// Nemesis.
	Fault string    `json:"fault,omitempty"`
	End   time.Time `json:"end,omitzero"`
	Limit int       `json:"limit,omitempty"`
	Note  string    `json:"note,omitempty"`

	// The isolation level of a grant's start, or in force at a fault (TestChaos).
	Isolation string `json:"isolation,omitempty"`
}

// Writer appends events to one ledger file. It is safe for concurrent use.
type Writer struct {
	mu     sync.Mutex
	f      *os.File
	offset time.Duration
}

// Create opens path for appending (creating it).
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &Writer{f: f}, nil
}

// SetOffset sets the offset of the DB clock to the local clock that Now adds.
func (w *Writer) SetOffset(d time.Duration) {
	w.mu.Lock()
	w.offset = d
	w.mu.Unlock()
}

// DBTime maps a local time onto the DB clock.
func (w *Writer) DBTime(t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return t.Add(w.offset).Round(0)
}

// Now is the current time on the DB clock.
func (w *Writer) Now() time.Time { return w.DBTime(time.Now()) }

// Write appends e as one line, with one write(2).
func (w *Writer) Write(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// MeasureOffset estimates the DB clock minus the local clock from n samples of
// clock_timestamp(): the sample with the shortest round trip wins, and its half round trip is the
// error bound.
func MeasureOffset(ctx context.Context, now func(ctx context.Context) (time.Time, error), n int) (offset, errBound time.Duration, err error) {
	best := time.Duration(-1)
	for range n {
		t0 := time.Now()
		db, err := now(ctx)
		t1 := time.Now()
		if err != nil {
			return 0, 0, err
		}
		rtt := t1.Sub(t0)
		if best < 0 || rtt < best {
			best = rtt
			mid := t0.Add(rtt / 2)
			offset = db.Sub(mid.Round(0))
		}
	}
	return offset, best / 2, nil
}

// ReadDir reads every *.jsonl file of dir. A torn last line (a writer killed mid-write; one
// write(2) makes that unlikely but not impossible) is skipped.
func ReadDir(dir string) ([]Event, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var all []Event
	for _, p := range paths {
		evs, err := ReadFile(p)
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
	}
	return all, nil
}

// ReadFile reads one ledger file.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	var evs []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var e Event
		if err := json.Unmarshal([]byte(text), &e); err != nil {
			if !strings.HasSuffix(text, "}") {
				continue // torn last write
			}
			return nil, fmt.Errorf("ledger: %s:%d: %w", path, line, err)
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", path, err)
	}
	return evs, nil
}

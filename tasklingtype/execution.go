package tasklingtype

import (
	"encoding/json"
	"time"
)

// Status is an execution's status, derived on the database clock when it is read.
type Status string

const (
	// StatusInProgress: granted, not completed, and alive (heartbeat or override time not yet passed).
	StatusInProgress Status = "in_progress"
	// StatusCompleted: completed without being marked failed.
	StatusCompleted Status = "completed"
	// StatusFailed: completed after RecordError(…, true), or Run's function failed.
	StatusFailed Status = "failed"
	// StatusBlocked: denied (a limit or a key's limit reached, a rate with no room, a duplicate
	// reference, a cost that no longer fits, or gave up waiting).
	StatusBlocked Status = "blocked"
	// StatusDead: stopped without completing (its death threshold passed, in either death mode),
	// or its slot was reclaimed by another execution.
	StatusDead Status = "dead"
	// StatusWaiting: a WaitForSlot start queued for a slot (LastExecutions only; it has no
	// execution yet: ID is its ticket, StartedAt when it queued, Position its place in line).
	StatusWaiting Status = "waiting"
)

// ExecutionInfo is one execution of a task, as history reports it.
type ExecutionInfo struct {
	// ID is unique, but each process reserves ids ahead in batches: they jump (1, 18, 35) and
	// follow start order only within one process. Order by StartedAt, as the lists do.
	ID             int64
	StartedAt      time.Time
	CompletedAt    time.Time // zero while not completed
	Status         Status
	ReferenceValue string
	Host           string
	ItemsDone      int64
	ItemsTotal     int64
	FencingToken   int64 // 0 for a blocked attempt
	Header         json.RawMessage
	// HeaderError says why Header is nil although the execution has one: encoding/json cannot
	// read the stored value (nested deeper than 10 000, written with SQL).
	HeaderError   string
	BlockedReason string
	ReclaimedAt   time.Time // zero unless another execution took its slot
	// LastHeartbeat is the last heartbeat on the database clock (the start time until the first).
	LastHeartbeat time.Time
	// LibraryVersion is the taskling version of the process that started it.
	LibraryVersion string
	// ScheduledFor is the cron instant a scheduler run (or a Blocked overlap-skipped instant)
	// was for; zero for other executions.
	ScheduledFor time.Time
	// Position is a waiting start's place in the queue for a slot (1: next); 0 otherwise. A
	// keyed waiter's is its place in its key's line.
	Position int
	// Key and Cost are the start's (StartOptions.Key, StartOptions.Cost): "" is no key.
	Key  string
	Cost int
	// SubmissionID is the submission this execution ran an attempt of (Work), and Attempt that
	// attempt's number (1: the first); both 0 for an execution that ran no submission.
	SubmissionID int64
	Attempt      int
}

// ExecutionRef names an execution with its status.
type ExecutionRef struct {
	ID        int64
	Status    Status
	StartedAt time.Time
}

// EventType is the kind of an execution event.
type EventType string

const (
	EventStart      EventType = "start"
	EventCheckpoint EventType = "checkpoint"
	EventError      EventType = "error"
	EventEnd        EventType = "end"
	EventBlocked    EventType = "blocked"
)

// ExecutionEvent is one event of an execution.
type ExecutionEvent struct {
	Type       EventType
	Message    string
	OccurredAt time.Time
}

// ExecutionDetail is one execution with its task and events.
type ExecutionDetail struct {
	ExecutionInfo
	Application string
	Task        string
	Events      []ExecutionEvent
}

// TimelineBar is one execution that held a slot of a task during a timeline's window.
type TimelineBar struct {
	ExecutionID int64
	Host        string
	StartedAt   time.Time
	// EndedAt is when it stopped holding its slot: its end, its reclaim, or (dead, not yet
	// reclaimed) its last heartbeat. Zero while it runs.
	EndedAt time.Time
	// Status is in_progress, completed, failed or dead.
	Status Status
	// ReclaimedAt is when another requester took its slot, judging it dead (zero if never).
	ReclaimedAt  time.Time
	FencingToken int64
	// Key and Cost are the execution's: it held Cost slots under Key.
	Key  string
	Cost int
}

// TimelineMinute is the grants (starts that got a slot), denials (blocked starts) and reclaims
// (slots taken from dead holders) of one minute.
type TimelineMinute struct {
	Minute                    time.Time // its start, UTC
	Grants, Denials, Reclaims int64
}

// TaskTimeline is a window of a task's slot use.
type TaskTimeline struct {
	// From and Now bound the window, on the database clock.
	From, Now time.Time
	// Bars are the executions that held a slot during the window, newest first; Truncated says
	// there were more than asked.
	Bars      []TimelineBar
	Truncated bool
	// Minutes are the minutes of the window with any grant, denial or reclaim, in no particular
	// order; a minute may appear more than once (add them up).
	Minutes []TimelineMinute
}

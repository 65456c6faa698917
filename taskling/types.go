package taskling

import "github.com/taskling-go/taskling/tasklingtype"

// The read side's types — what the client returns about tasks, executions, submissions, blocks,
// changes and schedules — are package tasklingtype's, shared with the HTTP API and the CLI. Each
// is declared here under its own name, with its constants: the fields are documented there.

// Executions and their history.
type (
	// Status is an execution's status, derived on the database clock when it is read.
	Status = tasklingtype.Status
	// ExecutionInfo is one execution of a task, as history reports it.
	ExecutionInfo = tasklingtype.ExecutionInfo
	// ExecutionRef names an execution with its status.
	ExecutionRef = tasklingtype.ExecutionRef
	// ExecutionDetail is one execution with its task and events.
	ExecutionDetail = tasklingtype.ExecutionDetail
	// EventType is the kind of an execution event.
	EventType = tasklingtype.EventType
	// ExecutionEvent is one event of an execution.
	ExecutionEvent = tasklingtype.ExecutionEvent
	// TaskTimeline is a window of a task's slot use.
	TaskTimeline = tasklingtype.TaskTimeline
	// TimelineBar is one execution that held a slot of a task during a timeline's window.
	TimelineBar = tasklingtype.TimelineBar
	// TimelineMinute is the grants, denials and reclaims of one minute.
	TimelineMinute = tasklingtype.TimelineMinute
)

const (
	StatusInProgress Status = tasklingtype.StatusInProgress
	StatusCompleted  Status = tasklingtype.StatusCompleted
	StatusFailed     Status = tasklingtype.StatusFailed
	StatusBlocked    Status = tasklingtype.StatusBlocked
	StatusDead       Status = tasklingtype.StatusDead
	StatusWaiting    Status = tasklingtype.StatusWaiting
)

const (
	EventStart      EventType = tasklingtype.EventStart
	EventCheckpoint EventType = tasklingtype.EventCheckpoint
	EventError      EventType = tasklingtype.EventError
	EventEnd        EventType = tasklingtype.EventEnd
	EventBlocked    EventType = tasklingtype.EventBlocked
)

// Tasks, their slots and their settings as operators see them.
type (
	// TaskInfo is one task as operators see it.
	TaskInfo = tasklingtype.TaskInfo
	// TaskDetail is one task with its slots.
	TaskDetail = tasklingtype.TaskDetail
	// LimitSource says where a setting of a task in force comes from.
	LimitSource = tasklingtype.LimitSource
	// Disagreement is the last declaration of a task's limit that another host's different one
	// replaced.
	Disagreement = tasklingtype.Disagreement
	// Retirement says when, and by whom, a task or its schedule was retired.
	Retirement = tasklingtype.Retirement
	// SlotStatus is the state of one slot.
	SlotStatus = tasklingtype.SlotStatus
	// Slot is one slot of a task and its holder.
	Slot = tasklingtype.Slot
	// Holder is the execution a slot was granted to, judged on the database clock.
	Holder = tasklingtype.Holder
	// KeyInfo is one key of a task: its holders, cost in use, waiters and limit.
	KeyInfo = tasklingtype.KeyInfo
	// KeyLimitSource says where a key's limit comes from.
	KeyLimitSource = tasklingtype.KeyLimitSource
	// TaskRetention is a task's retention: what is in force, where it comes from, and its
	// cleanups.
	TaskRetention = tasklingtype.TaskRetention
	// Retention is how long a task's history is kept, by outcome (see TaskSettings.KeepCompleted).
	Retention = tasklingtype.Retention
	// CleanupCounts are the rows one cleanup deleted, or in a dry run would delete.
	CleanupCounts = tasklingtype.CleanupCounts
	// SettingsUpdate is an operator override stored in the task row: nil fields are left as they
	// are.
	SettingsUpdate = tasklingtype.SettingsUpdate
	// DeathMode is how the death of an execution that stopped without completing is judged.
	DeathMode = tasklingtype.DeathMode
	// Change is one operator change of a task, as its audit trail records it.
	Change = tasklingtype.Change
)

const (
	LimitSourceOverride LimitSource = tasklingtype.LimitSourceOverride
	LimitSourceDeclared LimitSource = tasklingtype.LimitSourceDeclared
	LimitSourceNone     LimitSource = tasklingtype.LimitSourceNone
)

const (
	KeySourceOverride         KeyLimitSource = tasklingtype.KeySourceOverride
	KeySourceKeyLimitOverride KeyLimitSource = tasklingtype.KeySourceKeyLimitOverride
	KeySourceDeclaredKey      KeyLimitSource = tasklingtype.KeySourceDeclaredKey
	KeySourceDeclared         KeyLimitSource = tasklingtype.KeySourceDeclared
	KeySourceNone             KeyLimitSource = tasklingtype.KeySourceNone
)

// MaxKeysShown bounds TaskDetail.Keys.
const MaxKeysShown = tasklingtype.MaxKeysShown

const (
	SlotHeld      SlotStatus = tasklingtype.SlotHeld
	SlotAvailable SlotStatus = tasklingtype.SlotAvailable
	SlotRetiring  SlotStatus = tasklingtype.SlotRetiring
	SlotUnlimited SlotStatus = tasklingtype.SlotUnlimited
)

const (
	// DeathModeKeepAlive (the default): the execution sends a heartbeat every KeepAliveInterval
	// and is dead once no heartbeat arrived for KeepAliveDeathThreshold.
	DeathModeKeepAlive DeathMode = tasklingtype.DeathModeKeepAlive
	// DeathModeOverride: no heartbeat; the execution is dead OverrideThreshold after its start.
	DeathModeOverride DeathMode = tasklingtype.DeathModeOverride
)

// deathModeUnset inherits the mode from the layer below.
const deathModeUnset DeathMode = 0

// Submissions.
type (
	// SubmissionStatus is where a submission stands.
	SubmissionStatus = tasklingtype.SubmissionStatus
	// Submission is a submitted run and where it stands.
	Submission = tasklingtype.Submission
	// SubmissionCount is how many submissions of a task have a status.
	SubmissionCount = tasklingtype.SubmissionCount
	// TraceContext is a W3C trace context, as stored with a submission.
	TraceContext = tasklingtype.TraceContext
)

const (
	SubmissionWaiting    SubmissionStatus = tasklingtype.SubmissionWaiting
	SubmissionInProgress SubmissionStatus = tasklingtype.SubmissionInProgress
	SubmissionCompleted  SubmissionStatus = tasklingtype.SubmissionCompleted
	SubmissionDead       SubmissionStatus = tasklingtype.SubmissionDead
	SubmissionCancelled  SubmissionStatus = tasklingtype.SubmissionCancelled
)

// Blocks.
type (
	// BlockStatus is a block's state, from its latest attempt.
	BlockStatus = tasklingtype.BlockStatus
	// BlockInfo is a block as operators see it (the CLI, the HTTP API, the dashboard).
	BlockInfo = tasklingtype.BlockInfo
	// BlockAttemptInfo is one attempt of a block.
	BlockAttemptInfo = tasklingtype.BlockAttemptInfo
	// BlockCount is how many blocks of a task are in one status, and how many of those are at
	// their retry limit.
	BlockCount = tasklingtype.BlockCount
)

const (
	BlockNotStarted BlockStatus = tasklingtype.BlockNotStarted
	BlockStarted    BlockStatus = tasklingtype.BlockStarted
	BlockCompleted  BlockStatus = tasklingtype.BlockCompleted
	BlockFailed     BlockStatus = tasklingtype.BlockFailed
	BlockDead       BlockStatus = tasklingtype.BlockDead
)

// Schedules and sign-in sessions.
type (
	// ScheduleEventKind is the kind of a schedule event.
	ScheduleEventKind = tasklingtype.ScheduleEventKind
	// ScheduleEvent records instants a schedule decided not to run, as a range, or a
	// registration.
	ScheduleEvent = tasklingtype.ScheduleEvent
	// APISession is one sign-in session of the HTTP API and dashboard.
	APISession = tasklingtype.APISession
)

const (
	ScheduleEventSkipped    ScheduleEventKind = tasklingtype.ScheduleEventSkipped
	ScheduleEventExpired    ScheduleEventKind = tasklingtype.ScheduleEventExpired
	ScheduleEventDisabled   ScheduleEventKind = tasklingtype.ScheduleEventDisabled
	ScheduleEventRegistered ScheduleEventKind = tasklingtype.ScheduleEventRegistered
	ScheduleEventChanged    ScheduleEventKind = tasklingtype.ScheduleEventChanged
	ScheduleEventRetired    ScheduleEventKind = tasklingtype.ScheduleEventRetired
)

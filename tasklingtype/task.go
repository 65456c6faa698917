package tasklingtype

import (
	"fmt"
	"time"

	"github.com/google/uuid"
)

// LimitSource says where a setting of a task in force — its limit, whether it is enabled —
// comes from.
type LimitSource string

const (
	// LimitSourceOverride: an operator's override stored in the task row.
	LimitSourceOverride LimitSource = "override"
	// LimitSourceDeclared: the value last declared by a requester (its code or config).
	LimitSourceDeclared LimitSource = "declared"
	// LimitSourceNone: nothing declared yet (the task row exists but was never acquired).
	LimitSourceNone LimitSource = "none"
)

// TaskInfo is one task as operators see it.
type TaskInfo struct {
	Application string
	Task        string
	// Limit in force: the operator's override if set, else the last requester's declared limit;
	// -1 unlimited, 0 while LimitSource is LimitSourceNone.
	Limit       int
	LimitSource LimitSource
	// DeclaredLimit is the limit the last requester declared (0: none yet), by DeclaredBy.
	DeclaredLimit int
	DeclaredBy    string
	// Disagreement is set when, within the last 10 minutes, a host declared a limit other than
	// the one another host had declared (their settings differ: files not yet reloaded, say). The
	// limit in force at each grant is the requester's declaration; an override settles it.
	Disagreement *Disagreement
	// Enabled says whether the task's starts are served: its enabled override if set (false for
	// a retired task), else what its hosts last declared, else true (the default);
	// EnabledSource says which: LimitSourceOverride, LimitSourceDeclared or LimitSourceNone.
	Enabled       bool
	EnabledSource LimitSource
	// Overrides are the operator's overrides of the task row's settings (nil fields are not
	// overridden), last changed at OverridesUpdatedAt (zero if never). The keep overrides are in
	// TaskDetail.Retention.Overrides: their fields here are always nil, and a change of them alone
	// does not move OverridesUpdatedAt.
	Overrides          SettingsUpdate
	OverridesUpdatedAt time.Time
	// SettingsError, when not nil, says why every start of the task fails on the host that
	// declared its settings last: the overrides over that declaration are invalid (a host
	// declared settings they do not fit after they were set; a *SettingsError naming the field
	// and both sources). Change or clear the overrides, or the host's settings.
	SettingsError error
	// SlotsUsed counts slots held by live executions (for an unlimited task, its live
	// executions); SlotsTotal is the limit in force (-1 unlimited); SlotsRetiring counts held
	// slots to be removed when returned, after a lowered limit.
	SlotsUsed     int
	SlotsTotal    int
	SlotsRetiring int
	// Fence is the last fencing token granted.
	Fence int64
	// LastExecution is the newest execution, granted or denied; nil if none.
	LastExecution *ExecutionRef
	// Waiting counts the live WaitForSlot starts queued for a slot, fleet-wide; OldestWaitSince
	// is when the oldest of them queued (database clock; zero if none).
	Waiting         int
	OldestWaitSince time.Time
	// QueuedSubmissions counts the task's submissions waiting to start (status waiting),
	// fleet-wide: what the metrics' taskling_submissions{status="waiting"} shows. Waiting does not
	// count them; a submission a Work loop claimed is counted here, and its worker's start in
	// Waiting too while that start waits for a slot.
	QueuedSubmissions int
	// KeyLimit is every key's limit in force (0: none), from KeyLimitSource: the operator's
	// override of KeyLimit, else what the last requester declared. Named keys may have their own
	// (TaskDetail.Keys). KeysWaiting counts the keys with live waiters.
	KeyLimit       int
	KeyLimitSource LimitSource
	KeysWaiting    int
	// Rate is the task's rate in force (zero: none), from RateSource: the operator's override
	// (Overrides.Rate) if set, else what the last requester declared. KeyRate is every key's rate
	// in force, from KeyRateSource; named keys may have their own (KeyInfo.Rate). A Burst of 1
	// reads as 0 (its default). See docs/rates.md.
	Rate          Rate
	RateSource    LimitSource
	KeyRate       Rate
	KeyRateSource LimitSource
	// NextAllowed is how long, from the read, until a start of cost 1 fits the task's rate,
	// measured on the database clock (0: it fits now, or the task has no rate). Another start may
	// take that room first.
	NextAllowed time.Duration
	// Retired is when and by whom the task was retired (nil if it is not: see RetireTask);
	// HasSchedule says it has a schedule (Schedule), ScheduleRetired when that was retired.
	Retired         *Retirement
	HasSchedule     bool
	ScheduleRetired *Retirement
}

// Disagreement is the last declaration of a task's limit that another host's different one
// replaced: OtherHost had declared OtherLimit until At.
type Disagreement struct {
	OtherLimit int
	OtherHost  string
	At         time.Time
}

// Retirement says when, and by whom, a task or its schedule was retired: By is the operator's
// Name (Operator.Name; the principal of a change through `taskling serve`).
type Retirement struct {
	At time.Time
	By string
}

// TaskDetail is one task with its slots.
type TaskDetail struct {
	TaskInfo
	Slots []Slot
	// Keys are the task's busiest keys — most cost in use first, then most waiters, then most
	// submissions queued — and its named keys (those with a limit or a rate of their own, the empty
	// key "" too), at most MaxKeysShown; KeysTotal counts them all. A task whose starts carry no key
	// and that names none, with no key limit or key rate, has none. The task's summary, Slots and
	// Keys are read in one snapshot, and SlotsUsed counts the Slots whose holder is alive: they
	// always agree.
	Keys      []KeyInfo
	KeysTotal int
	// Retention is how long the task's history is kept and when it was last cleaned.
	Retention TaskRetention
}

// TaskRetention is a task's retention: what is in force, where it comes from, and its cleanups.
type TaskRetention struct {
	// Keep is in force: Overrides over Declared (over this client's settings when no host declared).
	Keep Retention
	// Declared is what the task's hosts last declared (nil: none yet), and by which host.
	Declared   *Retention
	DeclaredBy string
	// Overrides are the operator's (nil fields: not overridden).
	Overrides struct{ Completed, Failed, Blocked *time.Duration }
	// LastCleaned is when the last cleanup of the task started (nil: never); CleaningBy names the
	// host cleaning it now ("" if none); RowsDeleted counts every cleanup's rows.
	LastCleaned *time.Time
	CleaningBy  string
	RowsDeleted int64
}

// MaxKeysShown bounds TaskDetail.Keys.
const MaxKeysShown = 50

// KeyInfo is one key of a task: its live holders and the cost they hold, its live waiters (starts
// waiting for a slot), its submissions waiting to start (QueuedSubmissions: status waiting, as
// TaskInfo.QueuedSubmissions), its limit in force (0: none) and where that comes from, its rate
// in force (zero: none) and where that comes from, and how long until a start of cost 1 fits that
// rate (NextAllowed, on the database clock; 0: now, or no rate).
type KeyInfo struct {
	Key               string
	Holders           int
	CostInUse         int
	Waiting           int
	QueuedSubmissions int
	Limit             int
	LimitSource       KeyLimitSource
	Rate              Rate
	RateSource        KeyLimitSource
	NextAllowed       time.Duration
}

// KeyLimitSource says where a key's limit, or its rate, comes from (for a rate, "key limit"
// reads "key rate": KeySourceKeyLimitOverride is the operator's override of KeyRate).
type KeyLimitSource string

const (
	// KeySourceOverride: the operator's override of the key (UpdateKeySettings).
	KeySourceOverride KeyLimitSource = "override"
	// KeySourceKeyLimitOverride: the operator's override of KeyLimit (SettingsUpdate.KeyLimit).
	KeySourceKeyLimitOverride KeyLimitSource = "override_key_limit"
	// KeySourceDeclaredKey: the key's own limit as the last requester declared it
	// (TaskSettings.Keys).
	KeySourceDeclaredKey KeyLimitSource = "declared_key"
	// KeySourceDeclared: KeyLimit as the last requester declared it.
	KeySourceDeclared KeyLimitSource = "declared"
	// KeySourceNone: no key limit.
	KeySourceNone KeyLimitSource = "none"
)

// Retention is how long a task's history is kept, by outcome (see TaskSettings.KeepCompleted).
type Retention struct {
	Completed time.Duration
	Failed    time.Duration
	Blocked   time.Duration
}

// CleanupCounts are the rows one cleanup deleted, or in a dry run would delete.
type CleanupCounts struct {
	// Executions by outcome, each with its events, end and block attempts.
	Completed int64
	Failed    int64 // failed and dead
	Blocked   int64 // denied starts
	// Blocks completed whose latest attempt's execution was deleted, with their items (dry runs
	// do not count them).
	Blocks int64
	// Finished submissions deleted (those without a reference value).
	Submissions int64
	// Finished submissions with a reference value, kept without their header so that a
	// duplicate reference still returns them.
	Compacted int64
	// Cron instants of deleted executions, recorded so that Backfill never runs them again.
	Instants int64
}

// Rows is every deleted row counted (executions, blocks and submissions).
func (c CleanupCounts) Rows() int64 {
	return c.Completed + c.Failed + c.Blocked + c.Blocks + c.Submissions
}

// SlotStatus is the state of one slot.
type SlotStatus string

const (
	SlotHeld      SlotStatus = "held"
	SlotAvailable SlotStatus = "available"
	// SlotRetiring: held, but removed when returned (the limit was lowered below the live holders).
	SlotRetiring SlotStatus = "retiring"
	// SlotUnlimited: an unlimited task shows one such slot per execution that may hold it.
	SlotUnlimited SlotStatus = "unlimited"
)

// Slot is one slot of a task and its holder.
type Slot struct {
	TokenID uuid.UUID
	Status  SlotStatus
	Holder  *Holder // nil for an available slot
}

// Holder is the execution a slot was granted to, judged on the database clock.
type Holder struct {
	ExecutionID int64
	// Found is false when the execution row is missing: the slot is then free for the next start,
	// and the other fields are zero.
	Found         bool
	Host          string
	StartedAt     time.Time
	LastHeartbeat time.Time
	HeartbeatAge  time.Duration
	Alive         bool
	Fence         int64
	ItemsDone     int64
	ItemsTotal    int64
}

// DeathMode is how the death of an execution that stopped without completing is judged. Liveness
// is always judged on the database clock, never on a host's clock. The numbers are stored; never
// renumber them.
type DeathMode int

const (
	// DeathModeKeepAlive (the default): the execution sends a heartbeat every KeepAliveInterval
	// and is dead once no heartbeat arrived for KeepAliveDeathThreshold.
	DeathModeKeepAlive DeathMode = 1
	// DeathModeOverride: no heartbeat; the execution is dead OverrideThreshold after its start.
	DeathModeOverride DeathMode = 2
)

func (m DeathMode) String() string {
	switch m {
	case 0: // not set: inherits the mode from the layer below
		return "unset"
	case DeathModeKeepAlive:
		return "keepalive"
	case DeathModeOverride:
		return "override"
	}
	return fmt.Sprintf("DeathMode(%d)", int(m))
}

// SettingsUpdate is an operator override stored in the task row: nil fields are left as they are.
// Overrides win over every host's declared settings until ClearOverrides.
type SettingsUpdate struct {
	ConcurrencyLimit        *int
	Enabled                 *bool
	DeathMode               *DeathMode
	KeepAliveInterval       *time.Duration
	KeepAliveDeathThreshold *time.Duration
	OverrideThreshold       *time.Duration
	// KeyLimit overrides every key's limit (see TaskSettings.KeyLimit): 0 for no key limit.
	// Named keys are overridden one by one (UpdateKeySettings).
	KeyLimit *int
	// Rate overrides the task's rate, KeyRate every key's (see TaskSettings.Rate): a zero Rate
	// overrides it to none. Named keys' rates are overridden one by one (UpdateKeySettings).
	Rate    *Rate
	KeyRate *Rate
	// Keep settings (see TaskSettings.KeepCompleted): how long cleanup keeps the task's history.
	KeepCompleted *time.Duration
	KeepFailed    *time.Duration
	KeepBlocked   *time.Duration
	// By names who makes the change, in the task's audit trail (TaskChanges), when the update
	// goes through Client.UpdateTaskSettings: it is the Operator's Name ("" means "library@" and
	// the client's host name). Operations.UpdateTaskSettings ignores it. It is not a setting:
	// Task reports it empty.
	//
	// Deprecated: use client.As(Operator{Name: by}).UpdateTaskSettings, which records the same.
	By string
}

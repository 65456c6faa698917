package httpapi

import (
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/tasklingtype"
)

// The JSON shapes of the API. The CLI's --output json prints the same shapes, so a script
// written against one works against the other. Durations are Go duration strings ("20s");
// times are RFC 3339 on the database clock.
//
// Each shape comes from one of package tasklingtype's types, the library's own: through that
// type's JSON tags where it has them (Submission, BlockInfo, BlockAttemptInfo), else through one
// view here, built by one function (NewTask, NewSlots, NewExecution, NewRetention, NewChange,
// retirementView, disagreementOf), which writes null where the Go type holds a zero for "none".

// Task is one task: its limit in force and where it comes from, slot usage, overrides and its
// newest execution.
type Task struct {
	Application string `json:"application"`
	Task        string `json:"task"`
	// Limit in force: -1 unlimited; 0 while LimitSource is "none".
	Limit         int     `json:"limit"`
	LimitSource   string  `json:"limit_source"` // "override", "declared" or "none"
	DeclaredLimit *int    `json:"declared_limit"`
	DeclaredBy    *string `json:"declared_by"`
	// Disagreement: within the last 10 minutes another host had declared a different limit
	// (null if not).
	Disagreement *Disagreement `json:"disagreement"`
	Enabled      *bool         `json:"enabled_override"` // null: not overridden
	// EnabledNow says whether starts are served; EnabledSource where that comes from:
	// "override", "declared" (what its hosts last declared) or "none" (nothing yet: the default).
	EnabledNow    bool   `json:"enabled"`
	EnabledSource string `json:"enabled_source"`
	// SettingsError: every start fails on the host that declared last, because the overrides
	// over its declaration are invalid (null if they are valid).
	SettingsError *string        `json:"settings_error"`
	SlotsUsed     int            `json:"slots_used"`
	SlotsTotal    int            `json:"slots_total"` // -1 unlimited
	SlotsRetiring int            `json:"slots_retiring"`
	Fence         int64          `json:"fence"`
	Overrides     Overrides      `json:"overrides"`
	LastExecution *LastExecution `json:"last_execution"`
	// Waiting counts the live starts waiting for a slot (WaitForSlot starts, a Work loop's
	// among them), fleet-wide; OldestWaitSince is when the oldest queued (null if none).
	// QueuedSubmissions counts the submissions waiting to start (status waiting), which Waiting
	// does not count: a claimed one's start is counted in both while it waits for a slot.
	Waiting           int        `json:"waiting"`
	OldestWaitSince   *time.Time `json:"oldest_wait_since"`
	QueuedSubmissions int        `json:"queued_submissions"`
	// CriticalSectionOf names, for a task's critical section (an internal task, named
	// "<task> [critical section]": see docs/blocks.md), the task it belongs to; null for any other.
	CriticalSectionOf *string `json:"critical_section_of"`
	// Retired: when and by whom the task was retired (null if it is not); HasSchedule: it has a
	// schedule, retired as ScheduleRetired says.
	Retired         *Retirement `json:"retired"`
	HasSchedule     bool        `json:"has_schedule"`
	ScheduleRetired *Retirement `json:"schedule_retired"`
	// KeyLimit is every key's limit in force (null: none), from KeyLimitSource ("override",
	// "declared" or "none"); KeysWaiting counts the keys with live waiters.
	KeyLimit       *int   `json:"key_limit"`
	KeyLimitSource string `json:"key_limit_source"`
	KeysWaiting    int    `json:"keys_waiting"`
	// Rate is the task's rate in force ("30/1m", "500/1s,burst=50"; null: none), from RateSource
	// ("override", "declared" or "none"); KeyRate every key's, from KeyRateSource.
	Rate          *string `json:"rate"`
	RateSource    string  `json:"rate_source"`
	KeyRate       *string `json:"key_rate"`
	KeyRateSource string  `json:"key_rate_source"`
	// NextAllowed is how long, from the read, until a start of cost 1 fits the task's rate, on
	// the database clock ("0s": now, or no rate); NextAllowedSeconds the same in seconds.
	NextAllowed        string  `json:"next_allowed"`
	NextAllowedSeconds float64 `json:"next_allowed_seconds"`
}

// Key is one key of a task: its live holders, the cost they hold, its live waiters (starts
// waiting for a slot), its submissions waiting to start (queued_submissions), its limit (null: none) and where it comes from ("override", "override_key_limit", "declared_key",
// "declared" or "none"), its rate (null: none) and where that comes from (the same names,
// "override_key_limit" being the override of key_rate), and how long until a start of cost 1
// fits that rate (as Task's next_allowed).
type Key struct {
	Key                string  `json:"key"`
	Holders            int     `json:"holders"`
	CostInUse          int     `json:"cost_in_use"`
	Waiting            int     `json:"waiting"`
	QueuedSubmissions  int     `json:"queued_submissions"`
	Limit              *int    `json:"limit"`
	LimitSource        string  `json:"limit_source"`
	Rate               *string `json:"rate"`
	RateSource         string  `json:"rate_source"`
	NextAllowed        string  `json:"next_allowed"`
	NextAllowedSeconds float64 `json:"next_allowed_seconds"`
}

// NewKeys converts a task's keys.
func NewKeys(keys []tasklingtype.KeyInfo) []Key {
	out := make([]Key, len(keys))
	for i, k := range keys {
		out[i] = Key{Key: k.Key, Holders: k.Holders, CostInUse: k.CostInUse, Waiting: k.Waiting, QueuedSubmissions: k.QueuedSubmissions, Limit: nonZero(k.Limit),
			LimitSource: string(k.LimitSource), Rate: nonEmpty(k.Rate.String()), RateSource: string(k.RateSource)}
		out[i].NextAllowed, out[i].NextAllowedSeconds = nextAllowedView(k.NextAllowed)
	}
	return out
}

// nextAllowedView writes a time until the next allowed start, to the millisecond.
func nextAllowedView(d time.Duration) (string, float64) {
	return d.Round(time.Millisecond).String(), d.Round(time.Millisecond).Seconds()
}

// overrideRate writes a rate override: null not overridden, "none" overridden to none.
func overrideRate(r *tasklingtype.Rate) *string {
	if r == nil {
		return nil
	}
	s := r.String()
	if r.IsZero() {
		s = "none"
	}
	return &s
}

// Disagreement is a different limit another host declared until at.
type Disagreement struct {
	OtherLimit int       `json:"other_limit"`
	OtherHost  string    `json:"other_host"`
	At         time.Time `json:"at"`
}

// Overrides are the operator's overrides stored in the task row; null fields are not overridden.
type Overrides struct {
	ConcurrencyLimit        *int    `json:"concurrency_limit"`
	Enabled                 *bool   `json:"enabled"`
	DeathMode               *string `json:"death_mode"`
	KeepAliveInterval       *string `json:"keep_alive_interval"`
	KeepAliveDeathThreshold *string `json:"keep_alive_death_threshold"`
	OverrideThreshold       *string `json:"override_threshold"`
	KeyLimit                *int    `json:"key_limit"`
	// Rate and KeyRate: "30/1m", or "none" (overridden to no rate).
	Rate      *string    `json:"rate"`
	KeyRate   *string    `json:"key_rate"`
	UpdatedAt *time.Time `json:"updated_at"`
}

// LastExecution is a task's newest execution.
type LastExecution struct {
	ID        int64     `json:"id"`
	Status    string    `json:"status"`
	StartedAt time.Time `json:"started_at"`
}

// TaskDetail is one task with its slots.
type TaskDetail struct {
	Task
	Slots     []Slot    `json:"slots"`
	Retention Retention `json:"retention"`
	// Keys are the busiest keys and the named ones (at most 50); KeysTotal counts them all.
	Keys      []Key `json:"keys"`
	KeysTotal int   `json:"keys_total"`
}

// Retention is a task's keep settings ("14d", "36h", "forever") and its cleanups.
type Retention struct {
	KeepCompleted string `json:"keep_completed"`
	KeepFailed    string `json:"keep_failed"`
	KeepBlocked   string `json:"keep_blocked"`
	// Overridden lists the keep settings an operator overrides ("completed", "failed", "blocked").
	Overridden  []string   `json:"overridden"`
	DeclaredBy  *string    `json:"declared_by"` // null: no host declared keep settings yet
	LastCleaned *time.Time `json:"last_cleaned_at"`
	CleaningBy  *string    `json:"cleaning_by"`
	RowsDeleted int64      `json:"rows_deleted"`
}

// NewRetention converts a task's retention.
func NewRetention(r tasklingtype.TaskRetention) Retention {
	out := Retention{KeepCompleted: taskling.FormatKeep(r.Keep.Completed), KeepFailed: taskling.FormatKeep(r.Keep.Failed),
		KeepBlocked: taskling.FormatKeep(r.Keep.Blocked), Overridden: []string{}, LastCleaned: r.LastCleaned, RowsDeleted: r.RowsDeleted}
	for _, o := range []struct {
		name string
		set  bool
	}{{"completed", r.Overrides.Completed != nil}, {"failed", r.Overrides.Failed != nil}, {"blocked", r.Overrides.Blocked != nil}} {
		if o.set {
			out.Overridden = append(out.Overridden, o.name)
		}
	}
	if r.Declared != nil {
		out.DeclaredBy = &r.DeclaredBy
	}
	if r.CleaningBy != "" {
		out.CleaningBy = &r.CleaningBy
	}
	return out
}

// Slot is one slot and its holder.
type Slot struct {
	TokenID string  `json:"token_id"`
	Status  string  `json:"status"` // held, available, retiring, unlimited
	Holder  *Holder `json:"holder"`
}

// Holder is the execution a slot was granted to, judged on the DB clock.
type Holder struct {
	ExecutionID int64 `json:"execution_id"`
	// Found is false when the execution row is missing: the slot is then free for the next start.
	Found               bool       `json:"found"`
	Host                string     `json:"host,omitempty"`
	StartedAt           *time.Time `json:"started_at,omitempty"`
	HeartbeatAge        string     `json:"heartbeat_age,omitempty"`
	HeartbeatAgeSeconds float64    `json:"heartbeat_age_seconds"`
	Alive               bool       `json:"alive"`
	Fence               int64      `json:"fence"`
	ItemsDone           *int64     `json:"items_done"`
	ItemsTotal          *int64     `json:"items_total"`
}

// Execution is one execution (one start attempt, granted or blocked). Ids are unique but reserved
// ahead by each process: they jump, and follow start order only within a process (lists are in
// start order).
type Execution struct {
	ID             int64           `json:"id"`
	Status         string          `json:"status"` // in_progress, completed, failed, blocked, dead
	StartedAt      time.Time       `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	LastKeepAlive  time.Time       `json:"last_keep_alive"`
	Host           string          `json:"host"`
	ReferenceValue *string         `json:"reference_value"`
	Header         json.RawMessage `json:"header"`
	// HeaderError says why header is null although the execution has one (its stored JSON
	// cannot be read).
	HeaderError    *string    `json:"header_error,omitempty"`
	FencingToken   *int64     `json:"fencing_token"`
	ItemsDone      *int64     `json:"items_done"`
	ItemsTotal     *int64     `json:"items_total"`
	BlockedReason  *string    `json:"blocked_reason"`
	ReclaimedAt    *time.Time `json:"reclaimed_at"`
	ScheduledFor   *time.Time `json:"scheduled_for"`
	LibraryVersion string     `json:"library_version"`
	// Key is the execution's key ("": none) and Cost the slots it held.
	Key  string `json:"key"`
	Cost int    `json:"cost"`
	// SubmissionID is the submission it ran an attempt of, Attempt that attempt's number (both
	// null for an execution that ran none).
	SubmissionID *int64  `json:"submission_id"`
	Attempt      *int    `json:"attempt"`
	Events       []Event `json:"events,omitempty"`
}

// Event is one event of an execution.
type Event struct {
	Type       string    `json:"type"` // start, checkpoint, error, end, blocked
	Message    *string   `json:"message"`
	OccurredAt time.Time `json:"occurred_at"`
}

// ExecutionPage is a page of a task's executions, newest first. NextBefore, when not null, is the
// "before" parameter of the next page.
type ExecutionPage struct {
	Executions []Execution `json:"executions"`
	NextBefore *int64      `json:"next_before"`
}

// NewTask converts a task.
func NewTask(s tasklingtype.TaskInfo) Task {
	o := s.Overrides
	t := Task{
		Application: s.Application, Task: s.Task, Limit: s.Limit, LimitSource: string(s.LimitSource),
		DeclaredLimit: nonZero(s.DeclaredLimit), DeclaredBy: nonEmpty(s.DeclaredBy), Enabled: o.Enabled,
		SlotsUsed: s.SlotsUsed, SlotsTotal: s.SlotsTotal, SlotsRetiring: s.SlotsRetiring, Fence: s.Fence,
		Waiting: s.Waiting, OldestWaitSince: nonZeroTime(s.OldestWaitSince), QueuedSubmissions: s.QueuedSubmissions,
		CriticalSectionOf: sectionOf(s.Task),
		Disagreement:      disagreementOf(s.Disagreement),
		Retired:           retirementView(s.Retired), HasSchedule: s.HasSchedule, ScheduleRetired: retirementView(s.ScheduleRetired),
		EnabledNow: s.Enabled, EnabledSource: string(s.EnabledSource),
		KeyLimit: nonZero(s.KeyLimit), KeyLimitSource: string(s.KeyLimitSource), KeysWaiting: s.KeysWaiting,
		Rate: nonEmpty(s.Rate.String()), RateSource: string(s.RateSource), KeyRate: nonEmpty(s.KeyRate.String()),
		KeyRateSource: string(s.KeyRateSource),
		Overrides: Overrides{
			KeyLimit:                o.KeyLimit,
			Rate:                    overrideRate(o.Rate),
			KeyRate:                 overrideRate(o.KeyRate),
			ConcurrencyLimit:        o.ConcurrencyLimit,
			Enabled:                 o.Enabled,
			KeepAliveInterval:       durationText(o.KeepAliveInterval),
			KeepAliveDeathThreshold: durationText(o.KeepAliveDeathThreshold),
			OverrideThreshold:       durationText(o.OverrideThreshold),
			UpdatedAt:               nonZeroTime(s.OverridesUpdatedAt),
		},
	}
	t.NextAllowed, t.NextAllowedSeconds = nextAllowedView(s.NextAllowed)
	if m := o.DeathMode; m != nil {
		name := m.String()
		t.Overrides.DeathMode = &name
	}
	if l := s.LastExecution; l != nil {
		t.LastExecution = &LastExecution{ID: l.ID, Status: string(l.Status), StartedAt: l.StartedAt}
	}
	if err := s.SettingsError; err != nil {
		msg := err.Error()
		t.SettingsError = &msg
	}
	return t
}

// sectionOf is the task whose critical section task is, or nil if task is none.
func sectionOf(task string) *string {
	if of, ok := strings.CutSuffix(task, taskling.SectionSuffix); ok {
		return &of
	}
	return nil
}

// NewSlots converts a task's slots.
func NewSlots(slots []tasklingtype.Slot) []Slot {
	out := make([]Slot, 0, len(slots))
	for _, s := range slots {
		v := Slot{TokenID: s.TokenID.String(), Status: string(s.Status)}
		if h := s.Holder; h != nil {
			v.Holder = &Holder{ExecutionID: h.ExecutionID, Found: h.Found}
			if h.Found {
				started := h.StartedAt
				v.Holder.Host, v.Holder.StartedAt, v.Holder.Alive, v.Holder.Fence = h.Host, &started, h.Alive, h.Fence
				v.Holder.HeartbeatAge = h.HeartbeatAge.Round(100 * time.Millisecond).String()
				v.Holder.HeartbeatAgeSeconds = h.HeartbeatAge.Seconds()
				v.Holder.ItemsDone, v.Holder.ItemsTotal = progress(h.ItemsDone, h.ItemsTotal)
			}
		}
		out = append(out, v)
	}
	return out
}

// NewExecution converts an execution and its events (nil: not read).
func NewExecution(x tasklingtype.ExecutionInfo, events []tasklingtype.ExecutionEvent) Execution {
	e := Execution{
		ID: x.ID, Status: string(x.Status), StartedAt: x.StartedAt, CompletedAt: nonZeroTime(x.CompletedAt),
		LastKeepAlive: x.LastHeartbeat, Host: x.Host, ReferenceValue: nonEmpty(x.ReferenceValue), Header: x.Header,
		HeaderError:  nonEmpty(x.HeaderError),
		FencingToken: nonZero(x.FencingToken), BlockedReason: nonEmpty(x.BlockedReason),
		ReclaimedAt: nonZeroTime(x.ReclaimedAt), ScheduledFor: nonZeroTime(x.ScheduledFor),
		LibraryVersion: x.LibraryVersion, Key: x.Key, Cost: x.Cost, SubmissionID: nonZero(x.SubmissionID), Attempt: nonZero(x.Attempt),
	}
	e.ItemsDone, e.ItemsTotal = progress(x.ItemsDone, x.ItemsTotal)
	for _, ev := range events {
		e.Events = append(e.Events, Event{Type: string(ev.Type), Message: nonEmpty(ev.Message), OccurredAt: ev.OccurredAt})
	}
	return e
}

// progress is null, null until progress was set.
func progress(done, total int64) (*int64, *int64) {
	if done == 0 && total == 0 {
		return nil, nil
	}
	return &done, &total
}

func nonZero[T int | int64](v T) *T {
	if v == 0 {
		return nil
	}
	return &v
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonZeroTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func durationText(d *time.Duration) *string {
	if d == nil {
		return nil
	}
	s := d.String()
	return &s
}

// Percent is done out of total as a whole percentage, 0 to 100, without overflowing for huge
// counts; 0 when total is unknown.
func Percent(done, total int64) int {
	switch {
	case total <= 0 || done <= 0:
		return 0
	case done >= total:
		return 100
	case done <= math.MaxInt64/100:
		return int(done * 100 / total)
	}
	return min(int(float64(done)/float64(total)*100), 99) // done < total: never 100 by rounding
}

// SubmissionDetail is one submission (tasklingtype.Submission's JSON) with the executions that ran
// its attempts, first attempt first.
type SubmissionDetail struct {
	tasklingtype.Submission
	AttemptsExecutions []int64 `json:"attempts_executions"`
}

// SubmissionPage is a page of a task's submissions: newest first, or in queue order when listing
// the waiting ones. NextBefore, when not null, is the "before" parameter of the next page (never
// set for the waiting ones, whose queue order is not id order).
type SubmissionPage struct {
	Submissions []tasklingtype.Submission `json:"submissions"`
	NextBefore  *int64                    `json:"next_before"`
}

// SubmitResponse is the answer to a submission.
type SubmitResponse struct {
	ID int64 `json:"id"`
}

func disagreementOf(d *tasklingtype.Disagreement) *Disagreement {
	if d == nil {
		return nil
	}
	return &Disagreement{OtherLimit: d.OtherLimit, OtherHost: d.OtherHost, At: d.At}
}

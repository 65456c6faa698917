package taskling

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskling-go/taskling/execution"
)

// The read side for operators and tools (the CLI, the HTTP API, dashboards): tasks with their
// slots and holders, executions with their events. Reads never take a task's lock, so they cannot
// slow the acquire path down; what they report is a snapshot judged on the database clock.

// ErrNotFound: no task or execution by that name or id.
var ErrNotFound = errors.New("taskling: not found")

// notFound says what was not found; it matches ErrNotFound.
type notFound string

func (e notFound) Error() string        { return "taskling: " + string(e) + ": not found" }
func (e notFound) Is(target error) bool { return target == ErrNotFound }

// Disagreement is the last declaration of a task's limit that another host's different one
// replaced: OtherHost had declared OtherLimit until At.
type Disagreement struct {
	OtherLimit int
	OtherHost  string
	At         time.Time
}

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
	// Overrides are the operator's overrides (nil fields are not overridden), last changed at
	// OverridesUpdatedAt (zero if never).
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
	// Retired is when and by whom the task was retired (nil if it is not: see RetireTask);
	// HasSchedule says it has a schedule (Schedule), ScheduleRetired when that was retired.
	Retired         *Retirement
	HasSchedule     bool
	ScheduleRetired *Retirement
}

// ExecutionRef names an execution with its status.
type ExecutionRef struct {
	ID        int64
	Status    Status
	StartedAt time.Time
}

// TaskDetail is one task with its slots.
type TaskDetail struct {
	TaskInfo
	Slots []Slot
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

// TaskStatusFilter keeps the tasks in one state (TaskFilter.Status).
type TaskStatusFilter string

const (
	// TaskBusy: at least one slot in use.
	TaskBusy TaskStatusFilter = "busy"
	// TaskAtLimit: a limited task with every slot in use (slots used ≥ the limit).
	TaskAtLimit TaskStatusFilter = "at_limit"
	// TaskWaiting: starts are queued for a slot.
	TaskWaiting TaskStatusFilter = "waiting"
	// TaskIdle: no slot in use and no start waiting.
	TaskIdle TaskStatusFilter = "idle"
	// TaskRetired: the retired tasks (RetireTask), which no other filter lists.
	TaskRetired TaskStatusFilter = "retired"
)

// TaskSort orders the tasks (TaskFilter.Sort).
type TaskSort string

const (
	// TaskSortName: by application, then task name (the default).
	TaskSortName TaskSort = "name"
	// TaskSortBusy: the tasks at their limit first, then the most slots in use, then the most
	// starts waiting, then by name.
	TaskSortBusy TaskSort = "busy"
)

// MaxTasksPage is the largest TaskFilter.Limit.
const MaxTasksPage = 500

// TaskFilter selects tasks, and a page of them. A nil *TaskFilter selects every task, ordered by
// application and task name; so does the zero TaskFilter.
type TaskFilter struct {
	// Application keeps only this application's tasks ("" = all).
	Application string
	// Search keeps the tasks whose "application/task" contains it, ignoring case ("" = all).
	Search string
	// Status keeps only the tasks in this state ("" = all but the retired ones).
	Status TaskStatusFilter
	// Sort orders the tasks ("" = TaskSortName).
	Sort TaskSort
	// Limit is the page size, 1 to MaxTasksPage; 0 means every matching task on one page.
	Limit int
	// Cursor starts the page where the one that returned it as NextCursor (or PrevCursor) ends
	// ("" = the first page). It holds the sort key, so pages neither repeat nor skip tasks when
	// tasks are created between them; it must be used with the same Sort.
	Cursor string
}

// TaskPage is the result of Tasks: a page of the tasks in the filter's order.
type TaskPage struct {
	Tasks []TaskInfo
	// NextCursor reads the next page ("" on the last page); PrevCursor the previous one (""
	// on the first page).
	NextCursor string
	PrevCursor string
	// Total counts the tasks matching the filter, on every page.
	Total int
	// Applications lists every application's name, whatever the filter.
	Applications []string
}

// taskCursor is what a TaskPage cursor holds: the key of a page's last task (first task, when
// Back) in sort order Sort.
type taskCursor struct {
	Sort    TaskSort `json:"s"`
	Back    bool     `json:"b,omitempty"`
	AtLimit bool     `json:"l,omitempty"`
	Used    int      `json:"u,omitempty"`
	Waiting int      `json:"w,omitempty"`
	App     string   `json:"a"`
	Task    string   `json:"t"`
	ID      int64    `json:"i"`
}

func encodeTaskCursor(sort TaskSort, back bool, k execution.TaskKey) string {
	b, _ := json.Marshal(taskCursor{Sort: sort, Back: back, AtLimit: k.AtLimit, Used: k.Used, Waiting: k.Waiting, App: k.Application, Task: k.Task, ID: k.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeTaskCursor(s string, sort TaskSort) (taskCursor, error) {
	var c taskCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&c)
	}
	if err != nil || c.ID < 1 {
		return c, fmt.Errorf("%w: TaskFilter.Cursor %q is not a cursor Tasks returned", ErrInvalidArgument, truncateText(s, 64))
	}
	if c.Sort != sort {
		return c, fmt.Errorf("%w: TaskFilter.Cursor was returned for sort %q, not %q", ErrInvalidArgument, c.Sort, sort)
	}
	return c, nil
}

func truncateText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Tasks returns the tasks filter selects, a page of them when filter.Limit is set, with how many
// match and every application's name. Filtering, sorting and paging run in the database.
func (c *Client) Tasks(ctx context.Context, filter *TaskFilter) (TaskPage, error) {
	var f TaskFilter
	if filter != nil {
		f = *filter
	}
	if f.Application != "" {
		if err := validateName("TaskFilter.Application", f.Application); err != nil {
			return TaskPage{}, err
		}
	}
	switch f.Status {
	case "", TaskBusy, TaskAtLimit, TaskWaiting, TaskIdle, TaskRetired:
	default:
		return TaskPage{}, fmt.Errorf("%w: TaskFilter.Status %q is not one of busy, at_limit, waiting, idle, retired", ErrInvalidArgument, f.Status)
	}
	switch f.Sort {
	case "":
		f.Sort = TaskSortName
	case TaskSortName, TaskSortBusy:
	default:
		return TaskPage{}, fmt.Errorf("%w: TaskFilter.Sort %q is not one of name, busy", ErrInvalidArgument, f.Sort)
	}
	if f.Limit < 0 || f.Limit > MaxTasksPage {
		return TaskPage{}, fmt.Errorf("%w: TaskFilter.Limit is %d; want 0 (every task) or 1 to %d", ErrInvalidArgument, f.Limit, MaxTasksPage)
	}
	q := execution.TaskListQuery{Application: f.Application, Search: f.Search, Status: string(f.Status), Sort: string(f.Sort), Limit: f.Limit}
	if f.Cursor != "" {
		if f.Limit == 0 {
			return TaskPage{}, fmt.Errorf("%w: TaskFilter.Cursor needs a TaskFilter.Limit", ErrInvalidArgument)
		}
		cur, err := decodeTaskCursor(f.Cursor, f.Sort)
		if err != nil {
			return TaskPage{}, err
		}
		q.After = &execution.TaskKey{AtLimit: cur.AtLimit, Used: cur.Used, Waiting: cur.Waiting, Application: cur.App, Task: cur.Task, ID: cur.ID}
		q.Backward = cur.Back
	}
	list, err := c.store.ListTasks(ctx, q)
	if err != nil {
		return TaskPage{}, err
	}
	page := TaskPage{Tasks: make([]TaskInfo, len(list.Tasks)), Total: list.Total, Applications: list.Applications}
	for i, s := range list.Tasks {
		page.Tasks[i] = taskInfoOf(s)
	}
	if n := len(list.Keys); n > 0 && f.Limit > 0 {
		// Read forward, More says a next page follows; read backward, that a previous one does.
		// The other way, a page follows whenever a cursor led here.
		hasNext, hasPrev := list.More, q.After != nil
		if q.Backward {
			hasNext, hasPrev = true, list.More
		}
		if hasNext {
			page.NextCursor = encodeTaskCursor(f.Sort, false, list.Keys[n-1])
		}
		if hasPrev {
			page.PrevCursor = encodeTaskCursor(f.Sort, true, list.Keys[0])
		}
	}
	return page, nil
}

// Task returns one task with its slots, or an error wrapping ErrNotFound.
func (c *Client) Task(ctx context.Context, app, task string) (TaskDetail, error) {
	if err := validateTask(app, task); err != nil {
		return TaskDetail{}, err
	}
	sum, ok, err := c.store.TaskSummary(ctx, app, task)
	if err != nil {
		return TaskDetail{}, err
	}
	if !ok {
		return TaskDetail{}, notFound("task " + app + "/" + task)
	}
	slots, err := c.store.TaskSlots(ctx, sum.ID)
	if err != nil {
		return TaskDetail{}, err
	}
	d := TaskDetail{TaskInfo: taskInfoOf(sum), Slots: make([]Slot, len(slots))}
	for i, s := range slots {
		d.Slots[i] = slotOf(s)
	}
	st, err := c.store.RetentionOf(ctx, sum.ID)
	if err != nil {
		return TaskDetail{}, err
	}
	keep, err := c.keepOf(ctx, execution.CleanupTask{TaskID: sum.ID, Application: app, Task: task, Retention: st})
	if err != nil {
		return TaskDetail{}, err
	}
	d.Retention = TaskRetention{Keep: retentionOf(keep), DeclaredBy: st.DeclaredBy, LastCleaned: st.LastCleaned,
		CleaningBy: st.CleaningBy, RowsDeleted: st.RowsDeleted}
	if st.Declared != nil {
		r := retentionOf(*st.Declared)
		d.Retention.Declared = &r
	}
	d.Retention.Overrides.Completed, d.Retention.Overrides.Failed, d.Retention.Overrides.Blocked =
		st.Overrides.Completed, st.Overrides.Failed, st.Overrides.Blocked
	return d, nil
}

// MaxExecutionsPage is the largest page Executions returns.
const MaxExecutionsPage = 500

// DefaultExecutionsPage is the page size when ExecutionFilter.Limit is 0.
const DefaultExecutionsPage = 50

// ExecutionFilter selects a page of a task's executions, newest first. A nil *ExecutionFilter
// means the newest DefaultExecutionsPage executions of any status.
type ExecutionFilter struct {
	// Status keeps only executions with this status ("" = all).
	Status Status
	// Before keeps only executions with a smaller id (0 = from the newest): pass the previous
	// page's NextBefore to get the next page.
	Before int64
	// Limit is the page size, 1 to MaxExecutionsPage; 0 means DefaultExecutionsPage.
	Limit int
}

// ExecutionPage is a page of executions, newest first. NextBefore is the Before of the next page,
// 0 when this is the last.
type ExecutionPage struct {
	Executions []ExecutionInfo
	NextBefore int64
}

// Executions returns a page of app/task's executions, newest first, or an error wrapping
// ErrNotFound when the task does not exist.
func (c *Client) Executions(ctx context.Context, app, task string, filter *ExecutionFilter) (ExecutionPage, error) {
	if err := validateTask(app, task); err != nil {
		return ExecutionPage{}, err
	}
	f := ExecutionFilter{}
	if filter != nil {
		f = *filter
	}
	if f.Status != "" {
		if _, err := ParseStatus(string(f.Status)); err != nil {
			return ExecutionPage{}, err
		}
	}
	switch {
	case f.Limit == 0:
		f.Limit = DefaultExecutionsPage
	case f.Limit < 1 || f.Limit > MaxExecutionsPage:
		return ExecutionPage{}, fmt.Errorf("%w: ExecutionFilter.Limit is %d; want 1 to %d", ErrInvalidArgument, f.Limit, MaxExecutionsPage)
	}
	if f.Before < 0 {
		return ExecutionPage{}, fmt.Errorf("%w: ExecutionFilter.Before is %d; want an execution id or 0", ErrInvalidArgument, f.Before)
	}
	id, ok, err := c.store.FindTask(ctx, app, task)
	if err != nil {
		return ExecutionPage{}, err
	}
	if !ok {
		return ExecutionPage{}, notFound("task " + app + "/" + task)
	}
	rows, more, err := c.store.Executions(ctx, execution.ExecutionsQuery{TaskID: id, Status: string(f.Status), BeforeID: f.Before, Limit: f.Limit})
	if err != nil {
		return ExecutionPage{}, err
	}
	page := ExecutionPage{Executions: make([]ExecutionInfo, len(rows))}
	for i, r := range rows {
		page.Executions[i] = infoFromRow(r)
	}
	if more {
		page.NextBefore = rows[len(rows)-1].ID
	}
	return page, nil
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

// Execution returns one execution with its events, or an error wrapping ErrNotFound.
func (c *Client) Execution(ctx context.Context, id int64) (ExecutionDetail, error) {
	if id < 1 {
		return ExecutionDetail{}, fmt.Errorf("%w: execution id %d; want a positive integer", ErrInvalidArgument, id)
	}
	row, ok, err := c.store.Execution(ctx, id)
	if err != nil {
		return ExecutionDetail{}, err
	}
	if !ok {
		return ExecutionDetail{}, notFound(fmt.Sprintf("execution %d", id))
	}
	events, err := c.store.Events(ctx, id)
	if err != nil {
		return ExecutionDetail{}, err
	}
	d := ExecutionDetail{ExecutionInfo: infoFromRow(row.ExecutionRow), Application: row.Application, Task: row.Task,
		Events: make([]ExecutionEvent, len(events))}
	for i, ev := range events {
		d.Events[i] = ExecutionEvent{Type: EventType(ev.Type), Message: ev.Message, OccurredAt: ev.OccurredAt}
	}
	return d, nil
}

// ParseStatus returns the Status named s, or an error wrapping ErrInvalidArgument that lists the
// statuses.
func ParseStatus(s string) (Status, error) {
	for _, st := range Statuses {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("%w: status %q; want %s", ErrInvalidArgument, s, statusList)
}

func taskInfoOf(s execution.TaskSummary) TaskInfo {
	t := TaskInfo{
		Application: s.Application, Task: s.Task, Limit: s.Limit, LimitSource: LimitSource(s.LimitSource),
		SlotsUsed: s.SlotsUsed, SlotsTotal: s.SlotsTotal, SlotsRetiring: s.SlotsRetiring, Fence: s.Fence,
		Waiting: s.Waiting, OldestWaitSince: s.OldestWait,
		Overrides: updateOf(s.Overrides),
		Retired:   retirementOf(s.Retired), HasSchedule: s.HasSchedule, ScheduleRetired: retirementOf(s.ScheduleRetired),
	}
	if s.DeclaredLimit != nil {
		t.DeclaredLimit = *s.DeclaredLimit
	}
	if s.DeclaredBy != nil {
		t.DeclaredBy = *s.DeclaredBy
	}
	if d := s.Dispute; d != nil {
		t.Disagreement = &Disagreement{OtherLimit: d.Limit, OtherHost: d.Host, At: d.At}
	}
	if s.Overrides.UpdatedAt != nil {
		t.OverridesUpdatedAt = *s.Overrides.UpdatedAt
	}
	if l := s.LastExecution; l != nil {
		t.LastExecution = &ExecutionRef{ID: l.ID, Status: Status(l.Status), StartedAt: l.StartedAt}
	}
	t.Enabled, t.EnabledSource = true, LimitSourceNone
	switch {
	case s.Retired != nil:
		t.Enabled, t.EnabledSource = false, LimitSourceOverride // retiring disables it in its row
	case s.Overrides.Enabled != nil:
		t.Enabled, t.EnabledSource = *s.Overrides.Enabled, LimitSourceOverride
	case s.Declaration != nil:
		t.Enabled, t.EnabledSource = s.Declaration.Enabled, LimitSourceDeclared
	}
	t.SettingsError = s.SettingsError()
	return t
}

func slotOf(s execution.Slot) Slot {
	out := Slot{TokenID: s.TokenID, Status: SlotStatus(s.Status)}
	if h := s.Holder; h != nil {
		out.Holder = &Holder{
			ExecutionID: h.ExecutionID, Found: h.Found, Host: h.Host, StartedAt: h.StartedAt,
			LastHeartbeat: h.LastKeepAlive, HeartbeatAge: h.HeartbeatAge, Alive: h.Alive, Fence: h.Fence,
			ItemsDone: h.ItemsDone, ItemsTotal: h.ItemsTotal,
		}
	}
	return out
}

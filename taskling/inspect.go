package taskling

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/taskling-go/taskling/internal/store/adminstore"
	"github.com/taskling-go/taskling/internal/store/historystore"
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

// TaskFilter selects tasks, and a page of them. A nil *TaskFilter selects every task but the
// retired ones, ordered by application and task name; so does the zero TaskFilter.
type TaskFilter struct {
	// Application keeps only this application's tasks ("" = all).
	Application string
	// Search keeps the tasks whose "application/task" contains it, ignoring case ("" = all). It
	// holds the characters of a name (ValidateChars), else Tasks fails with ErrInvalidArgument.
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

func encodeTaskCursor(sort TaskSort, back bool, k adminstore.TaskKey) string {
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
	if err != nil || c.ID < 1 || validateTask(c.App, c.Task) != nil {
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
// match and every application's name. Filtering, sorting and paging run in the database. Like
// SubmissionCounts, it first compacts the submission tally that QueuedSubmissions is read from,
// at most once a minute per client.
func (c *Client) Tasks(ctx context.Context, filter *TaskFilter) (_ TaskPage, err error) {
	defer wrapErr(&err, "list tasks")
	var f TaskFilter
	if filter != nil {
		f = *filter
	}
	if f.Application != "" {
		if err := validateName("TaskFilter.Application", f.Application); err != nil {
			return TaskPage{}, err
		}
	}
	if err := ValidateChars("TaskFilter.Search", f.Search); err != nil {
		return TaskPage{}, err
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
	c.compactTally(ctx) // QueuedSubmissions reads the tally, as SubmissionCounts does
	q := adminstore.TaskListQuery{Application: f.Application, Search: f.Search, Status: string(f.Status), Sort: string(f.Sort), Limit: f.Limit}
	if f.Cursor != "" {
		if f.Limit == 0 {
			return TaskPage{}, fmt.Errorf("%w: TaskFilter.Cursor needs a TaskFilter.Limit", ErrInvalidArgument)
		}
		cur, err := decodeTaskCursor(f.Cursor, f.Sort)
		if err != nil {
			return TaskPage{}, err
		}
		q.After = &adminstore.TaskKey{AtLimit: cur.AtLimit, Used: cur.Used, Waiting: cur.Waiting, Application: cur.App, Task: cur.Task, ID: cur.ID}
		q.Backward = cur.Back
	}
	list, err := c.admin.ListTasks(ctx, q)
	if err != nil {
		return TaskPage{}, err
	}
	page := TaskPage{Tasks: list.Tasks, Total: list.Total, Applications: list.Applications}
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

// Task returns one task with its slots and keys, read in one snapshot (SlotsUsed counts the Slots
// whose holder is alive), or an error wrapping ErrNotFound.
func (c *Client) Task(ctx context.Context, app, task string) (_ TaskDetail, err error) {
	defer wrapErr(&err, "task %s/%s", app, task)
	if err := validateTask(app, task); err != nil {
		return TaskDetail{}, err
	}
	c.compactTally(ctx)
	d, id, err := c.admin.TaskDetail(ctx, app, task, MaxKeysShown)
	if err != nil {
		return TaskDetail{}, err
	}
	if id == 0 {
		return TaskDetail{}, notFound("task " + app + "/" + task)
	}
	st, err := c.admin.RetentionOf(ctx, id)
	if err != nil {
		return TaskDetail{}, err
	}
	keep, err := c.keepOf(ctx, adminstore.CleanupTask{TaskID: id, Application: app, Task: task, Retention: st})
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
	// Before continues after the execution with this id, in the page's order (0 = from the
	// newest): pass the previous page's NextBefore to get the next page. If that execution is gone
	// (cleanup deleted it meanwhile), the page is empty: start again from the newest.
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
func (c *Client) Executions(ctx context.Context, app, task string, filter *ExecutionFilter) (_ ExecutionPage, err error) {
	defer wrapErr(&err, "executions of %s/%s", app, task)
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
	rows, more, err := c.history.Executions(ctx, historystore.ExecutionsQuery{TaskID: id, Status: string(f.Status), BeforeID: f.Before, Limit: f.Limit})
	if err != nil {
		return ExecutionPage{}, err
	}
	page := ExecutionPage{Executions: rows}
	if more {
		page.NextBefore = rows[len(rows)-1].ID
	}
	return page, nil
}

// Execution returns one execution with its events, or an error wrapping ErrNotFound.
func (c *Client) Execution(ctx context.Context, id int64) (_ ExecutionDetail, err error) {
	defer wrapErr(&err, "execution %d", id)
	if id < 1 {
		return ExecutionDetail{}, fmt.Errorf("%w: execution id %d; want a positive integer", ErrInvalidArgument, id)
	}
	d, ok, err := c.history.Execution(ctx, id)
	if err != nil {
		return ExecutionDetail{}, err
	}
	if !ok {
		return ExecutionDetail{}, notFound(fmt.Sprintf("execution %d", id))
	}
	if d.Events, err = c.history.Events(ctx, id); err != nil {
		return ExecutionDetail{}, err
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

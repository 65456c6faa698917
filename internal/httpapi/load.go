package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/tasklingtype"
)

// MaxPageSize is the largest page of executions served.
const MaxPageSize = taskling.MaxExecutionsPage

// MaxTasksPage is the largest page of tasks served; DefaultTasksPage the page size when the
// request gives none.
const (
	MaxTasksPage     = taskling.MaxTasksPage
	DefaultTasksPage = 50
)

// TasksQuery selects a page of tasks (GET /api/v1/tasks, the dashboard, `tasks list`).
type TasksQuery struct {
	Search string // q: case-insensitive substring of "app/task"
	App    string // exact application
	Status string // busy, at_limit, waiting, idle, retired ("": all but the retired)
	Sort   string // name (default), busy
	Limit  int    // 1 to MaxTasksPage; 0 every task
	Cursor string // a next_cursor
}

// Filter is the query as a taskling.TaskFilter.
func (q TasksQuery) Filter() *taskling.TaskFilter {
	return &taskling.TaskFilter{Application: q.App, Search: q.Search, Status: taskling.TaskStatusFilter(q.Status),
		Sort: taskling.TaskSort(q.Sort), Limit: q.Limit, Cursor: q.Cursor}
}

// ParseTasksQuery reads q, app, status, sort, limit and cursor from URL query values; field
// names the bad one.
func ParseTasksQuery(get func(string) string) (q TasksQuery, field string, err error) {
	q.Limit = DefaultTasksPage
	q.Search = get("q")
	if len(q.Search) > 200 {
		return q, "q", fmt.Errorf("q is %d bytes long; at most 200", len(q.Search))
	}
	if err := taskling.ValidateChars("q", q.Search); err != nil {
		return q, "q", err
	}
	if s := get("app"); s != "" {
		if err := taskling.ValidateName("application name", s); err != nil {
			return q, "app", err
		}
		q.App = s
	}
	switch s := get("status"); s {
	case "", string(taskling.TaskBusy), string(taskling.TaskAtLimit), string(taskling.TaskWaiting), string(taskling.TaskIdle), string(taskling.TaskRetired):
		q.Status = s
	default:
		return q, "status", fmt.Errorf("status %q is not one of busy, at_limit, waiting, idle, retired", s)
	}
	switch s := get("sort"); s {
	case "", string(taskling.TaskSortName), string(taskling.TaskSortBusy):
		q.Sort = s
	default:
		return q, "sort", fmt.Errorf("sort %q is not one of name, busy", s)
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxTasksPage {
			return q, "limit", fmt.Errorf("limit %q: want an integer from 1 to %d", s, MaxTasksPage)
		}
		q.Limit = n
	}
	q.Cursor = get("cursor")
	return q, "", nil
}

// TaskList is a page of tasks. NextCursor is null on the last page; Total counts the tasks
// matching the filters.
type TaskList struct {
	Tasks      []Task  `json:"tasks"`
	NextCursor *string `json:"next_cursor"`
	Total      int     `json:"total"`
	// PrevCursor reads the previous page ("" on the first); Applications lists every
	// application. The dashboard shows them.
	PrevCursor   string   `json:"-"`
	Applications []string `json:"-"`
}

// LoadTasks returns the page of tasks q selects. A bad cursor is an error wrapping
// taskling.ErrInvalidArgument.
func LoadTasks(ctx context.Context, c *taskling.Client, q TasksQuery) (TaskList, error) {
	page, err := c.Tasks(ctx, q.Filter())
	if err != nil {
		return TaskList{}, err
	}
	out := TaskList{Tasks: make([]Task, len(page.Tasks)), Total: page.Total, PrevCursor: page.PrevCursor, Applications: page.Applications}
	for i, t := range page.Tasks {
		out.Tasks[i] = NewTask(t)
	}
	if page.NextCursor != "" {
		next := page.NextCursor
		out.NextCursor = &next
	}
	return out, nil
}

// LoadTask returns one task with its slots, or an error wrapping taskling.ErrNotFound.
func LoadTask(ctx context.Context, c *taskling.Client, app, task string) (TaskDetail, error) {
	d, err := c.Task(ctx, app, task)
	if err != nil {
		return TaskDetail{}, err
	}
	return TaskDetail{Task: NewTask(d.TaskInfo), Slots: NewSlots(d.Slots), Retention: NewRetention(d.Retention),
		Keys: NewKeys(d.Keys), KeysTotal: d.KeysTotal}, nil
}

// ExecutionsQuery selects a page of a task's executions.
type ExecutionsQuery struct {
	App, Task string
	Status    string // "" all, else a status
	Before    int64  // 0 from the newest
	Limit     int
}

// LoadExecutions returns a page of a task's executions, newest first, or an error wrapping
// taskling.ErrNotFound when the task does not exist.
func LoadExecutions(ctx context.Context, c *taskling.Client, q ExecutionsQuery) (ExecutionPage, error) {
	p, err := c.Executions(ctx, q.App, q.Task, &taskling.ExecutionFilter{Status: tasklingtype.Status(q.Status), Before: q.Before, Limit: q.Limit})
	if err != nil {
		return ExecutionPage{}, err
	}
	page := ExecutionPage{Executions: make([]Execution, len(p.Executions))}
	for i, x := range p.Executions {
		page.Executions[i] = NewExecution(x, nil)
	}
	if p.NextBefore != 0 {
		next := p.NextBefore
		page.NextBefore = &next
	}
	return page, nil
}

// LoadExecution returns one execution with its events, or an error wrapping taskling.ErrNotFound.
func LoadExecution(ctx context.Context, c *taskling.Client, id int64) (Execution, error) {
	d, err := c.Execution(ctx, id)
	if err != nil {
		return Execution{}, err
	}
	return NewExecution(d.ExecutionInfo, d.Events), nil
}

// MaxSubmissionsPage is the largest page of submissions served.
const MaxSubmissionsPage = 1000

// SubmissionsQuery selects a page of a task's submissions.
type SubmissionsQuery struct {
	App, Task string
	Status    string // "" all, else a tasklingtype.SubmissionStatus
	Before    int64  // 0 from the newest
	Limit     int
}

// ParseSubmissionsQuery reads status, before and limit from URL query values.
func ParseSubmissionsQuery(get func(string) string) (q SubmissionsQuery, field string, err error) {
	q.Limit = DefaultPageSize
	if s := get("status"); s != "" {
		if _, err := taskling.ParseSubmissionStatus(s); err != nil {
			return q, "status", fmt.Errorf("status %q is not one of waiting, in_progress, completed, dead, cancelled", s)
		}
		q.Status = s
	}
	if s := get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return q, "before", fmt.Errorf("before %q is not a submission id (a positive integer)", s)
		}
		q.Before = n
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxSubmissionsPage {
			return q, "limit", fmt.Errorf("limit %q: want an integer from 1 to %d", s, MaxSubmissionsPage)
		}
		q.Limit = n
	}
	return q, "", nil
}

// LoadSubmissions returns a page of a task's submissions; a task never submitted to has none.
func LoadSubmissions(ctx context.Context, c *taskling.Client, q SubmissionsQuery) (SubmissionPage, error) {
	subs, err := c.Submissions(ctx, q.App, q.Task, &taskling.SubmissionFilter{Status: tasklingtype.SubmissionStatus(q.Status), Before: q.Before, Limit: q.Limit})
	if err != nil {
		return SubmissionPage{}, err
	}
	page := SubmissionPage{Submissions: subs}
	if page.Submissions == nil {
		page.Submissions = []tasklingtype.Submission{}
	}
	if n := len(subs); n > 0 && n == q.Limit && q.Status != string(tasklingtype.SubmissionWaiting) {
		next := subs[n-1].ID
		page.NextBefore = &next
	}
	return page, nil
}

// LoadSubmission returns one submission with its attempts' executions, or an error wrapping
// taskling.ErrNotFound.
func LoadSubmission(ctx context.Context, c *taskling.Client, id int64) (SubmissionDetail, error) {
	s, err := c.Submission(ctx, id)
	if err != nil {
		return SubmissionDetail{}, err
	}
	attempts, err := c.SubmissionAttempts(ctx, id)
	if err != nil {
		return SubmissionDetail{}, err
	}
	if attempts == nil {
		attempts = []int64{}
	}
	return SubmissionDetail{Submission: s, AttemptsExecutions: attempts}, nil
}

// SubmissionQueue is what the task page shows of a task's submissions: the running ones, the
// waiting ones in queue order, then the most recently finished ones.
type SubmissionQueue struct {
	Running  []tasklingtype.Submission
	Waiting  []tasklingtype.Submission
	Finished []tasklingtype.Submission
}

// LoadSubmissionQueue returns up to n submissions of each group.
func LoadSubmissionQueue(ctx context.Context, c *taskling.Client, app, task string, n int) (SubmissionQueue, error) {
	var q SubmissionQueue
	get := func(s tasklingtype.SubmissionStatus) ([]tasklingtype.Submission, error) {
		return c.Submissions(ctx, app, task, &taskling.SubmissionFilter{Status: s, Limit: n})
	}
	var err error
	if q.Running, err = get(tasklingtype.SubmissionInProgress); err != nil {
		return q, err
	}
	if q.Waiting, err = get(tasklingtype.SubmissionWaiting); err != nil {
		return q, err
	}
	// One query per finished status: the newest submissions of any status may all be waiting.
	for _, s := range []tasklingtype.SubmissionStatus{tasklingtype.SubmissionCompleted, tasklingtype.SubmissionDead, tasklingtype.SubmissionCancelled} {
		subs, err := get(s)
		if err != nil {
			return q, err
		}
		q.Finished = append(q.Finished, subs...)
	}
	slices.SortFunc(q.Finished, func(a, b tasklingtype.Submission) int {
		if c := finishedAt(b).Compare(finishedAt(a)); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	if len(q.Finished) > n {
		q.Finished = q.Finished[:n]
	}
	return q, nil
}

func finishedAt(s tasklingtype.Submission) time.Time {
	if s.FinishedAt == nil {
		return s.UpdatedAt
	}
	return *s.FinishedAt
}

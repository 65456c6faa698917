package httpapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/taskling-go/taskling/execution"
)

// ErrNotFound: no task or execution by that name or id.
var ErrNotFound = errors.New("not found")

// MaxPageSize is the largest page of executions served.
const MaxPageSize = 500

// LoadTasks returns every task.
func LoadTasks(ctx context.Context, store *execution.Store) ([]Task, error) {
	sums, err := store.ListTasks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Task, len(sums))
	for i, s := range sums {
		out[i] = NewTask(s)
	}
	return out, nil
}

// LoadTask returns one task with its slots, or an error wrapping ErrNotFound.
func LoadTask(ctx context.Context, store *execution.Store, app, task string) (TaskDetail, error) {
	sum, ok, err := store.TaskSummary(ctx, app, task)
	if err != nil {
		return TaskDetail{}, err
	}
	if !ok {
		return TaskDetail{}, fmt.Errorf("task %s/%s: %w", app, task, ErrNotFound)
	}
	slots, err := store.TaskSlots(ctx, sum.ID)
	if err != nil {
		return TaskDetail{}, err
	}
	return TaskDetail{Task: NewTask(sum), Slots: NewSlots(slots)}, nil
}

// ExecutionsQuery selects a page of a task's executions.
type ExecutionsQuery struct {
	App, Task string
	Status    string // "" all, else a derived status
	Before    int64  // 0 from the newest
	Limit     int
}

// LoadExecutions returns a page of a task's executions, newest first, or an error wrapping
// ErrNotFound when the task does not exist.
func LoadExecutions(ctx context.Context, store *execution.Store, q ExecutionsQuery) (ExecutionPage, error) {
	id, ok, err := store.FindTask(ctx, q.App, q.Task)
	if err != nil {
		return ExecutionPage{}, err
	}
	if !ok {
		return ExecutionPage{}, fmt.Errorf("task %s/%s: %w", q.App, q.Task, ErrNotFound)
	}
	rows, more, err := store.Executions(ctx, execution.ExecutionsQuery{TaskID: id, Status: q.Status, BeforeID: q.Before, Limit: q.Limit})
	if err != nil {
		return ExecutionPage{}, err
	}
	page := ExecutionPage{Executions: make([]Execution, len(rows))}
	for i, r := range rows {
		page.Executions[i] = NewExecution(r, nil)
	}
	if more {
		last := rows[len(rows)-1].ID
		page.NextBefore = &last
	}
	return page, nil
}

// LoadExecution returns one execution with its events, or an error wrapping ErrNotFound.
func LoadExecution(ctx context.Context, store *execution.Store, id int64) (Execution, error) {
	row, ok, err := store.Execution(ctx, id)
	if err != nil {
		return Execution{}, err
	}
	if !ok {
		return Execution{}, fmt.Errorf("execution %d: %w", id, ErrNotFound)
	}
	events, err := store.Events(ctx, id)
	if err != nil {
		return Execution{}, err
	}
	return NewExecution(row, events), nil
}

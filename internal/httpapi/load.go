package httpapi

import (
	"context"

	"github.com/taskling-go/taskling/taskling"
)

// MaxPageSize is the largest page of executions served.
const MaxPageSize = taskling.MaxExecutionsPage

// LoadTasks returns every task.
func LoadTasks(ctx context.Context, c *taskling.Client) ([]Task, error) {
	page, err := c.Tasks(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Task, len(page.Tasks))
	for i, t := range page.Tasks {
		out[i] = NewTask(t)
	}
	return out, nil
}

// LoadTask returns one task with its slots, or an error wrapping taskling.ErrNotFound.
func LoadTask(ctx context.Context, c *taskling.Client, app, task string) (TaskDetail, error) {
	d, err := c.Task(ctx, app, task)
	if err != nil {
		return TaskDetail{}, err
	}
	return TaskDetail{Task: NewTask(d.TaskInfo), Slots: NewSlots(d.Slots)}, nil
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
	p, err := c.Executions(ctx, q.App, q.Task, &taskling.ExecutionFilter{Status: taskling.Status(q.Status), Before: q.Before, Limit: q.Limit})
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

package taskling

import (
	"context"
	"fmt"
	"time"
)

// MaxTimelineBars is the most bars TaskTimeline returns.
const MaxTimelineBars = 10000

// TaskTimeline returns app/task's slot use over the last window (at most a day): the executions
// that held a slot, at most maxBars (1 to MaxTimelineBars) of the newest, and the grants, denials
// and reclaims per minute. Executions that started before the window and ended in it are found
// among the 2 000 granted just before it. It returns an error wrapping ErrNotFound when the
// task does not exist.
func (c *Client) TaskTimeline(ctx context.Context, app, task string, window time.Duration, maxBars int) (_ TaskTimeline, err error) {
	defer wrapErr(&err, "timeline of %s/%s", app, task)
	if err := validateTask(app, task); err != nil {
		return TaskTimeline{}, err
	}
	if window <= 0 || window > 24*time.Hour {
		return TaskTimeline{}, fmt.Errorf("%w: window is %v; want more than 0, at most 24h", ErrInvalidArgument, window)
	}
	if maxBars < 1 || maxBars > MaxTimelineBars {
		return TaskTimeline{}, fmt.Errorf("%w: maxBars is %d; want 1 to %d", ErrInvalidArgument, maxBars, MaxTimelineBars)
	}
	id, ok, err := c.store.FindTask(ctx, app, task)
	if err != nil {
		return TaskTimeline{}, err
	}
	if !ok {
		return TaskTimeline{}, notFound("task " + app + "/" + task)
	}
	return c.history.Timeline(ctx, id, window, maxBars)
}

package taskling

import "context"

// ScheduleHistory returns app/task's last n schedule events, newest first.
func (c *Client) ScheduleHistory(ctx context.Context, app, task string, n int) (_ []ScheduleEvent, err error) {
	defer wrapErr(&err, "schedule history of %s/%s", app, task)
	id, ok, err := c.historyOf(ctx, app, task, n)
	if err != nil || !ok {
		return nil, err
	}
	return c.scheds.ScheduleEvents(ctx, id, n)
}

package taskling

import (
	"context"
	"time"
)

// ScheduleEventKind is the kind of a schedule event.
type ScheduleEventKind string

const (
	// ScheduleEventSkipped: missed instants the catch-up policy did not run (or beyond MaxCatchUp).
	ScheduleEventSkipped ScheduleEventKind = "skipped"
	// ScheduleEventExpired: missed instants older than CatchUpWindow.
	ScheduleEventExpired ScheduleEventKind = "expired"
	// ScheduleEventDisabled: instants that came due while the task was disabled.
	ScheduleEventDisabled ScheduleEventKind = "disabled"
	// ScheduleEventRegistered: the first registration (cursor set to now).
	ScheduleEventRegistered ScheduleEventKind = "registered"
	// ScheduleEventChanged: the spec or zone changed (cursor moved to max(cursor, now)).
	ScheduleEventChanged ScheduleEventKind = "changed"
	// ScheduleEventRetired: instants that came due while the task or its schedule was retired,
	// recorded when it was unretired (the cursor then moves to now: they are not caught up).
	ScheduleEventRetired ScheduleEventKind = "retired"
)

// ScheduleEvent records instants a schedule decided not to run, as a range, or a
// registration. Instants skipped for overlap are Blocked executions in LastExecutions, with
// ScheduledFor set.
type ScheduleEvent struct {
	Kind ScheduleEventKind
	// First and Last instant of the range, and how many instants of the spec it holds (zero
	// for registrations).
	First, Last time.Time
	Instants    int64
	Detail      string
	Host        string
	RecordedAt  time.Time
}

// ScheduleHistory returns app/task's last n schedule events, newest first.
func (c *Client) ScheduleHistory(ctx context.Context, app, task string, n int) (_ []ScheduleEvent, err error) {
	defer wrapErr(&err, "schedule history of %s/%s", app, task)
	id, ok, err := c.historyOf(ctx, app, task, n)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.scheds.ScheduleEvents(ctx, id, n)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleEvent, len(rows))
	for i, r := range rows {
		e := ScheduleEvent{Kind: ScheduleEventKind(r.Kind), Instants: r.Instants, Host: r.Host, RecordedAt: r.RecordedAt}
		if r.First != nil {
			e.First = *r.First
		}
		if r.Last != nil {
			e.Last = *r.Last
		}
		if r.Detail != nil {
			e.Detail = *r.Detail
		}
		out[i] = e
	}
	return out, nil
}

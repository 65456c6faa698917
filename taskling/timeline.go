package taskling

import (
	"context"
	"fmt"
	"time"
)

// MaxTimelineBars is the most bars TaskTimeline returns.
const MaxTimelineBars = 10000

// TimelineBar is one execution that held a slot of a task during a timeline's window.
type TimelineBar struct {
	ExecutionID int64
	Host        string
	StartedAt   time.Time
	// EndedAt is when it stopped holding its slot: its end, its reclaim, or (dead, not yet
	// reclaimed) its last heartbeat. Zero while it runs.
	EndedAt time.Time
	// Status is in_progress, completed, failed or dead.
	Status Status
	// ReclaimedAt is when another requester took its slot, judging it dead (zero if never).
	ReclaimedAt  time.Time
	FencingToken int64
}

// TimelineMinute is the grants (starts that got a slot), denials (blocked starts) and reclaims
// (slots taken from dead holders) of one minute.
type TimelineMinute struct {
	Minute                    time.Time // its start, UTC
	Grants, Denials, Reclaims int64
}

// TaskTimeline is a window of a task's slot use.
type TaskTimeline struct {
	// From and Now bound the window, on the database clock.
	From, Now time.Time
	// Bars are the executions that held a slot during the window, newest first; Truncated says
	// there were more than asked.
	Bars      []TimelineBar
	Truncated bool
	// Minutes are the minutes of the window with any grant, denial or reclaim, in no particular
	// order; a minute may appear more than once (add them up).
	Minutes []TimelineMinute
}

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
	tl, err := c.history.Timeline(ctx, id, window, maxBars)
	if err != nil {
		return TaskTimeline{}, err
	}
	out := TaskTimeline{From: tl.From, Now: tl.Now, Truncated: tl.Truncated,
		Bars: make([]TimelineBar, len(tl.Bars)), Minutes: make([]TimelineMinute, len(tl.Minutes))}
	for i, b := range tl.Bars {
		bar := TimelineBar{ExecutionID: b.ID, Host: b.Host, StartedAt: b.StartedAt, Status: Status(b.Status)}
		if b.EndedAt != nil {
			bar.EndedAt = *b.EndedAt
		}
		if b.ReclaimedAt != nil {
			bar.ReclaimedAt = *b.ReclaimedAt
		}
		if b.Fence != nil {
			bar.FencingToken = *b.Fence
		}
		out.Bars[i] = bar
	}
	for i, m := range tl.Minutes {
		out.Minutes[i] = TimelineMinute{Minute: m.Minute, Grants: m.Grants, Denials: m.Denials, Reclaims: m.Reclaims}
	}
	return out, nil
}

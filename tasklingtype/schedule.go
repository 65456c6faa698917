package tasklingtype

import "time"

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

// Package codes names the smallint codes stored in the schema's status columns, once for Go.
// Migration 0018 names the same codes for SQL (taskling.submission_status('waiting'), …), and
// TestCodesAgreeWithTheSchema checks that the two agree. Statements name a code through those
// functions; Go passes one as a parameter only where the code is data (a row's status to write).
package codes

// Outcome: how an execution ended (taskling.execution_end.outcome; taskling.end_outcome).
const (
	OutcomeCompleted int16 = 1
	OutcomeFailed    int16 = 2
	OutcomeReclaimed int16 = 3 // taken by another requester: its holder was dead
)

// Submission statuses (taskling.submission.status; taskling.submission_status).
const (
	SubmissionWaiting    int16 = 1
	SubmissionInProgress int16 = 2
	SubmissionCompleted  int16 = 3
	SubmissionDead       int16 = 4
	SubmissionCancelled  int16 = 5
)

// Block statuses (taskling.block.status, block_attempt.status; taskling.block_status).
const (
	BlockNotStarted int16 = 1
	BlockStarted    int16 = 2
	BlockCompleted  int16 = 3
	BlockFailed     int16 = 4
)

// Block kinds (taskling.block.kind; taskling.block_kind).
const (
	BlockNumeric int16 = 1
	BlockDate    int16 = 2
	BlockList    int16 = 3
	BlockObject  int16 = 4
)

// List item statuses (taskling.list_block_item.status; taskling.item_status).
const (
	ItemPending   int16 = 1
	ItemCompleted int16 = 2
	ItemFailed    int16 = 3
	ItemDiscarded int16 = 4
)

// Death modes (taskling.task_execution.death_mode; taskling.death_mode).
const (
	DeathKeepAlive int16 = 1 // dead when the DB clock passes the last heartbeat + KeepAliveDeathThreshold
	DeathOverride  int16 = 2 // dead when the DB clock passes the start + OverrideThreshold
)

// Event types (taskling.task_execution_event.event_type; taskling.event_type).
const (
	EventStart      int16 = 1
	EventCheckpoint int16 = 2
	EventError      int16 = 3
	EventEnd        int16 = 4
	EventBlocked    int16 = 5
)

// Schedule event kinds (taskling.schedule_event.kind; taskling.schedule_event).
const (
	ScheduleSkipped    int16 = 1
	ScheduleExpired    int16 = 2
	ScheduleDisabled   int16 = 3
	ScheduleRegistered int16 = 4
	ScheduleChanged    int16 = 5
	ScheduleRetired    int16 = 6
)

// Names maps each SQL naming function to its names and codes, for the test that checks them
// against the schema and for code that prints a code.
var Names = map[string]map[string]int16{
	"end_outcome":       {"completed": OutcomeCompleted, "failed": OutcomeFailed, "reclaimed": OutcomeReclaimed},
	"submission_status": {"waiting": SubmissionWaiting, "in_progress": SubmissionInProgress, "completed": SubmissionCompleted, "dead": SubmissionDead, "cancelled": SubmissionCancelled},
	"block_status":      {"not_started": BlockNotStarted, "started": BlockStarted, "completed": BlockCompleted, "failed": BlockFailed},
	"block_kind":        {"numeric": BlockNumeric, "date": BlockDate, "list": BlockList, "object": BlockObject},
	"item_status":       {"pending": ItemPending, "completed": ItemCompleted, "failed": ItemFailed, "discarded": ItemDiscarded},
	"death_mode":        {"keep_alive": DeathKeepAlive, "override": DeathOverride},
	"event_type":        {"start": EventStart, "checkpoint": EventCheckpoint, "error": EventError, "end": EventEnd, "blocked": EventBlocked},
	"schedule_event":    {"skipped": ScheduleSkipped, "expired": ScheduleExpired, "disabled": ScheduleDisabled, "registered": ScheduleRegistered, "changed": ScheduleChanged, "retired": ScheduleRetired},
}

// Name returns the name of code in domain (a key of Names), or "" if it has none.
func Name(domain string, code int16) string {
	for name, c := range Names[domain] {
		if c == code {
			return name
		}
	}
	return ""
}

package execution

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskling-go/taskling/internal/codes"
)

// ScheduleEvent is one range of a schedule's instants decided without a run (skipped, expired,
// disabled, retired) or a registration or change: Kind is a name of codes.Names["schedule_event"].
type ScheduleEvent struct {
	Kind     string
	First    *time.Time
	Last     *time.Time
	Instants int64
	Detail   string
}

// ScheduleClaim makes an acquisition claim a cron instant: in the acquire transaction, the
// schedule's cursor moves from Expected to the claimed instant (AcquireRequest.ScheduledFor) by a
// compare-and-set, and Events (the instants before it decided without a run) are recorded. A
// stale claimer fails with an error for which IsScheduleConflict is true, and writes nothing.
type ScheduleClaim struct {
	Expected time.Time
	Events   []ScheduleEvent
}

// claimScheduleSQL moves the cursor of task $1's schedule from $9 to $8 by compare-and-set (a
// retired schedule's cursor does not move, so that a claim planned before its retirement fails)
// and records the events ($3–$7, by host $2) with it; if the cursor had moved, it raises TLC01, so
// that the whole transaction (its COMMIT is in the same batch) writes nothing.
const claimScheduleSQL = `
WITH u AS (
    UPDATE taskling.schedule SET cursor_at = $8 WHERE task_id = $1 AND cursor_at = $9 AND retired_at IS NULL
    RETURNING task_id
), ev AS (
    INSERT INTO taskling.schedule_event (task_id, kind, first_instant, last_instant, instants, detail, host_name)
    SELECT $1, e.k, e.f, e.l, e.n, e.d, $2
    FROM u, unnest($3::smallint[], $4::timestamptz[], $5::timestamptz[], $6::bigint[], $7::text[]) WITH ORDINALITY AS e(k, f, l, n, d, o)
    ORDER BY e.o
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN true ELSE taskling.schedule_cursor_moved($1) END`

// EventArrays are schedule events as the parallel arrays the statements take: kinds, first and
// last instants, counts, details.
type EventArrays struct {
	Kinds   []int16
	Firsts  []*time.Time
	Lasts   []*time.Time
	Counts  []int64
	Details []*string
}

// ToArrays lays events out as EventArrays.
func ToArrays(events []ScheduleEvent) EventArrays {
	var a EventArrays
	for _, e := range events {
		a.Kinds = append(a.Kinds, codes.Names["schedule_event"][e.Kind])
		a.Firsts = append(a.Firsts, e.First)
		a.Lasts = append(a.Lasts, e.Last)
		a.Counts = append(a.Counts, e.Instants)
		var d *string
		if e.Detail != "" {
			d = &e.Detail
		}
		a.Details = append(a.Details, d)
	}
	return a
}

// queueClaim adds the claim's compare-and-set to the acquire transaction's second batch.
func queueClaim(b *txBatch, req acquisition) {
	a := ToArrays(req.Schedule.Events)
	b.Queue(claimScheduleSQL, req.TaskID, req.Host, a.Kinds, a.Firsts, a.Lasts, a.Counts, a.Details,
		*req.ScheduledFor, req.Schedule.Expected)
}

// IsScheduleConflict reports whether err means a schedule claim lost to another host: the cursor
// had moved, or the instant was already claimed.
func IsScheduleConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "TLC01" ||
		pgErr.Code == "23505" && pgErr.ConstraintName == "task_execution_scheduled_for_key")
}

package scale

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
)

// Expected is what a cleanup with the library's default keep settings must delete, computed
// before it runs by a query of its own (window functions, not the cleanup's keyset walk).
type Expected struct {
	Completed, Failed, Blocked int64 // executions past retention and not protected, by class
	Instants                   int64 // of those, the ones with a cron instant
	Kept                       int64 // seeded executions that must remain
	// ProtectedOld counts executions past retention kept only because they are their task's
	// latest execution or latest scheduled one: the protection the cleanup must apply.
	ProtectedOld int64
	Events       int64 // events of the executions to delete
}

// Executions is every execution to delete.
func (e Expected) Executions() int64 { return e.Completed + e.Failed + e.Blocked }

// expectedSQL judges each execution up to $4 (keep settings $1 completed, $2 failed, $3 blocked):
// its class (1 completed, 2 failed or dead, 3 blocked), whether it is past retention, and whether
// the cleanup must delete it (doomed: past retention and not protected).
const expectedSQL = `
INSERT INTO public.scale_verdict (id, class, past, scheduled, doomed)
WITH r AS (
    SELECT e.id, e.blocked, e.scheduled_for, x.outcome,
           row_number() OVER (PARTITION BY e.task_id ORDER BY e.started_at DESC, e.id DESC) AS newest,
           row_number() OVER (PARTITION BY e.task_id ORDER BY e.scheduled_for DESC NULLS LAST) AS newest_instant,
           CASE WHEN e.blocked THEN e.started_at < clock_timestamp() - $3::interval
                WHEN x.outcome IS NULL THEN false
                WHEN x.outcome = 1 AND NOT e.failed THEN x.ended_at < clock_timestamp() - $1::interval
                ELSE x.ended_at < clock_timestamp() - $2::interval END AS past,
           CASE WHEN e.blocked THEN 3 WHEN x.outcome = 1 AND NOT e.failed THEN 1 ELSE 2 END AS class
    FROM taskling.task_execution e LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    WHERE e.id <= $4
)
SELECT id, class, past, scheduled_for IS NOT NULL AS scheduled,
       past AND newest > 1 AND NOT (scheduled_for IS NOT NULL AND newest_instant = 1) AS doomed
FROM r`

// Expect computes what the cleanup must delete among the seeded executions (ids up to
// seededUpTo), with the library's default keep settings.
func Expect(ctx context.Context, pool *pgxpool.Pool, seededUpTo int64) (Expected, error) {
	var e Expected
	_, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE public.scale_verdict (
    id bigint PRIMARY KEY, class smallint NOT NULL, past boolean NOT NULL, scheduled boolean NOT NULL, doomed boolean NOT NULL)`)
	if err != nil {
		return e, fmt.Errorf("scale: expected deletions: %w", err)
	}
	_, err = pool.Exec(ctx, expectedSQL, taskling.DefaultKeepCompleted, taskling.DefaultKeepFailed,
		taskling.DefaultKeepBlocked, seededUpTo)
	if err != nil {
		return e, fmt.Errorf("scale: expected deletions: %w", err)
	}
	err = pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE doomed AND class = 1), count(*) FILTER (WHERE doomed AND class = 2),
       count(*) FILTER (WHERE doomed AND class = 3), count(*) FILTER (WHERE doomed AND scheduled),
       count(*) FILTER (WHERE NOT doomed), count(*) FILTER (WHERE past AND NOT doomed),
       (SELECT count(*) FROM taskling.task_execution_event v JOIN public.scale_verdict d ON d.id = v.execution_id WHERE d.doomed)
FROM public.scale_verdict`).Scan(&e.Completed, &e.Failed, &e.Blocked, &e.Instants, &e.Kept, &e.ProtectedOld, &e.Events)
	if err != nil {
		return e, fmt.Errorf("scale: expected deletions: %w", err)
	}
	return e, nil
}

// Check is what verification found after the cleanup.
type Check struct {
	DoomedLeft   int64 // executions that should have been deleted and remain
	KeptGone     int64 // executions that should have remained and are gone
	OrphanEvents int64 // events whose execution is gone
	EventsLeft   int64 // events remaining
	Problems     []string
}

// OK reports whether the cleanup deleted exactly what it should.
func (c Check) OK() bool { return len(c.Problems) == 0 }

// Err is nil when OK, else the problems found.
func (c Check) Err() error {
	if c.OK() {
		return nil
	}
	errs := make([]error, len(c.Problems))
	for i, p := range c.Problems {
		errs[i] = errors.New(p)
	}
	return errors.Join(errs...)
}

// Verify compares the database and the cleanup's counts with e.
func Verify(ctx context.Context, pool *pgxpool.Pool, e Expected, got taskling.CleanupCounts) (Check, error) {
	var c Check
	err := pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE d.doomed AND e.id IS NOT NULL), count(*) FILTER (WHERE NOT d.doomed AND e.id IS NULL),
       (SELECT count(*) FROM taskling.task_execution_event v WHERE NOT EXISTS (
            SELECT 1 FROM taskling.task_execution x WHERE x.id = v.execution_id)),
       (SELECT count(*) FROM taskling.task_execution_event)
FROM public.scale_verdict d LEFT JOIN taskling.task_execution e ON e.id = d.id`).
		Scan(&c.DoomedLeft, &c.KeptGone, &c.OrphanEvents, &c.EventsLeft)
	if err != nil {
		return c, fmt.Errorf("scale: verify the cleanup: %w", err)
	}
	problem := func(format string, args ...any) { c.Problems = append(c.Problems, fmt.Sprintf(format, args...)) }
	if got.Rows() == 0 {
		problem("the cleanup deleted nothing")
	}
	if c.KeptGone > 0 {
		problem("%d executions that retention keeps (protected or not past it) were deleted", c.KeptGone)
	}
	if c.DoomedLeft > 0 {
		problem("%d executions past retention remain", c.DoomedLeft)
	}
	if c.OrphanEvents > 0 {
		problem("%d events of deleted executions remain", c.OrphanEvents)
	}
	for _, f := range []struct {
		name      string
		got, want int64
	}{{"completed", got.Completed, e.Completed}, {"failed", got.Failed, e.Failed}, {"blocked", got.Blocked, e.Blocked},
		{"cron instants", got.Instants, e.Instants}, {"blocks", got.Blocks, 0}, {"submissions", got.Submissions, 0}} {
		if f.got != f.want {
			problem("the cleanup counted %d %s; %d expected", f.got, f.name, f.want)
		}
	}
	return c, nil
}

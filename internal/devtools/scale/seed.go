// Package scale is the benchmark of issue 13 at the size of a real fleet's history: it seeds a
// fresh database with executions over many tasks (generate_series, in a few big statements),
// measures the read paths (LastExecutions, the tasks page API) and the acquire latency with and
// without a cleanup of that history running, and checks that the cleanup deleted exactly what
// the retention lets go. `make scale` (internal/devtools/cmd/scale) runs it at 1 M executions over 1 000
// tasks; `make test` runs a short profile (scale_test.go).
package scale

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Seeded history: tasks are named app<NN>/task-<n> (n from 0, NN = n mod 20). Executions go to
// task n with probability ∝ a square root's density (task 0 is the busiest, the last ones get
// about 1/60 of its rows), start every (Days / Executions) over the last Days — with a gap of
// ±gapHalf around the default keep settings (1, 14 and 40 days), so that what retention lets go
// does not change while the benchmark runs — and are, by (id·37) mod 100:
//
//	0–13  blocked (denied) starts
//	14–18 failed
//	19    dead (reclaimed by another requester)
//	20–99 completed, except id mod 2000 = 7: never ended (no end row: not yet judged dead)
//
// Completed and failed executions last 1 s to 30 min. Every third granted execution and every
// failed one has an event (a checkpoint, an error). Tasks with n mod 20 in {10, 15} are quiet:
// all their executions are 45–60 days old, so that retention would delete them all but for the
// latest-execution rule. Tasks with n mod 10 = 5 are scheduled: two thirds of their executions
// carry a cron instant (the latest of which is protected).
const (
	gapHalf     = 3 * time.Hour
	maxDuration = 30 * time.Minute
	seedChunk   = 250_000
)

// SeedOptions size the seeded history.
type SeedOptions struct {
	Tasks      int
	Executions int
	Days       int // how far back the executions start; at least 45
}

// Seeded is what Seed wrote and how long it took.
type Seeded struct {
	Tasks, Executions, Ends, Events int64
	Insert                          time.Duration // the INSERT … SELECT statements
	Vacuum                          time.Duration // VACUUM ANALYZE of the tables written
	At                              time.Time     // the database clock the executions' ages count from
}

// AppName and TaskName name seeded task n.
func AppName(n int) string { return fmt.Sprintf("app%02d", n%20) }

// TaskName names seeded task n among tasks.
func TaskName(n, tasks int) string {
	return fmt.Sprintf("task-%0*d", nameWidth(tasks), n)
}

func nameWidth(tasks int) int { return max(4, len(strconv.Itoa(tasks-1))) }

// seedTasksSQL creates tasks $1 named with width $2, declared at $3.
const seedTasksSQL = `
INSERT INTO taskling.task_definition (application_name, task_name, declared_limit, declared_by, declared_at)
SELECT 'app' || lpad((n % 20)::text, 2, '0'), 'task-' || lpad(n::text, $2, '0'), 1 + n % 3, 'scale-seed', $3
FROM generate_series(0, $1 - 1) n`

// taskMapSQL maps seeded task n to its id, for the transaction.
const taskMapSQL = `CREATE TEMP TABLE scale_task ON COMMIT DROP AS
SELECT id, (row_number() OVER (ORDER BY id) - 1)::int AS n FROM taskling.task_definition WHERE declared_by = 'scale-seed';
CREATE UNIQUE INDEX ON scale_task (n)`

// seedExecutionsSQL inserts executions $1 to $2 of $3 over $4 tasks (scale_task), started
// within $5 seconds before $6.
const seedExecutionsSQL = `
WITH s AS (
    SELECT i, (i * 37) % 100 AS kind,
           floor($4 * power(((i * 2654435761) % 4294967296) / 4294967296.0, 2))::int AS n,
           ($3 - i)::float8 * ($5::float8 - 6 * $7::float8) / $3 AS o0
    FROM generate_series($1::bigint, $2::bigint) i
),
a AS (
    SELECT s.i, s.kind, t.id AS task_id, t.n, CASE WHEN t.n % 20 IN (10, 15) THEN 45 * 86400 + s.o0 / 4 ELSE (
        SELECT o2 + CASE WHEN o2 >= 40 * 86400 - $7 THEN 2 * $7 ELSE 0 END
        FROM (SELECT o1 + CASE WHEN o1 >= 14 * 86400 - $7 THEN 2 * $7 ELSE 0 END AS o2
              FROM (SELECT s.o0 + CASE WHEN s.o0 >= 86400 - $7 THEN 2 * $7 ELSE 0 END AS o1) g1) g2) END AS age
    FROM s JOIN scale_task t ON t.n = s.n
),
b AS (SELECT a.*, $6::timestamptz - make_interval(secs => a.age) AS started FROM a)
INSERT INTO taskling.task_execution (id, task_id, started_at, completed_at, last_keep_alive, host_name, death_mode,
    keep_alive_interval, keep_alive_death_threshold, token_id, fence, blocked, blocked_reason, scheduled_for,
    header, library_version)
SELECT b.i, b.task_id, b.started, CASE WHEN b.kind < 14 THEN b.started END, b.started, 'host-' || (b.i % 8), 1,
    interval '5 seconds', interval '20 seconds', CASE WHEN b.kind >= 14 THEN gen_random_uuid() END,
    CASE WHEN b.kind >= 14 THEN b.i END, b.kind < 14,
    CASE WHEN b.kind < 14 THEN 'the concurrency limit was reached' END,
    CASE WHEN b.n % 10 = 5 AND b.i % 3 <> 0 THEN b.started END,
    CASE WHEN b.i % 4 = 0 THEN jsonb_build_object('file', 'export-' || b.i || '.csv', 'rows', b.i % 5000) END,
    'scale-seed'
FROM b`

// seedEndsSQL records the ends of executions $1 to $2 (all but the blocked and the never ended).
const seedEndsSQL = `
INSERT INTO taskling.execution_end (execution_id, ended_at, outcome, last_heartbeat)
SELECT e.id, e.started_at + make_interval(secs => 1 + (e.id * 7919) % $3),
       CASE WHEN e.id * 37 % 100 BETWEEN 14 AND 18 THEN 2 WHEN e.id * 37 % 100 = 19 THEN 3 ELSE 1 END,
       e.started_at + make_interval(secs => (e.id * 7919) % $3)
FROM taskling.task_execution e
WHERE e.id BETWEEN $1 AND $2 AND NOT e.blocked AND NOT (e.id * 37 % 100 >= 20 AND e.id % 2000 = 7)`

// seedEventsSQL adds a checkpoint to every third ended execution $1 to $2 and an error to the
// failed ones.
const seedEventsSQL = `
INSERT INTO taskling.task_execution_event (execution_id, event_type, message, occurred_at)
SELECT x.execution_id, CASE WHEN x.outcome = 2 THEN 3 ELSE 2 END,
       CASE WHEN x.outcome = 2 THEN 'upstream timed out after 3 retries' ELSE 'half of the rows exported' END,
       x.ended_at - interval '1 second'
FROM taskling.execution_end x
WHERE x.execution_id BETWEEN $1 AND $2 AND (x.outcome = 2 OR x.execution_id % 3 = 0)`

// Seed writes the history described above into a database holding the schema and no tasks.
func Seed(ctx context.Context, pool *pgxpool.Pool, o SeedOptions, progress func(string)) (Seeded, error) {
	var s Seeded
	if o.Tasks < 1 || o.Executions < o.Tasks || o.Days < 45 {
		return s, fmt.Errorf("scale: want tasks ≥ 1, executions ≥ tasks and days ≥ 45, got %+v", o)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return s, err
	}
	defer conn.Release()
	began := time.Now()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&s.At); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, seedTasksSQL, o.Tasks, nameWidth(o.Tasks), s.At)
		return err
	})
	if err != nil {
		return s, fmt.Errorf("scale: seed the tasks: %w", err)
	}
	// Each chunk is its own transaction, with its own map of the tasks.
	span := float64(o.Days * 86400)
	for from := int64(1); from <= int64(o.Executions); from += seedChunk {
		to := min(from+seedChunk-1, int64(o.Executions))
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, taskMapSQL); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, seedExecutionsSQL, from, to, o.Executions, o.Tasks, span, s.At, gapHalf.Seconds()); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, seedEndsSQL, from, to, int(maxDuration.Seconds())); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, seedEventsSQL, from, to)
			return err
		})
		if err != nil {
			return s, fmt.Errorf("scale: seed executions %d to %d: %w", from, to, err)
		}
		if progress != nil {
			progress(fmt.Sprintf("seeded %d of %d executions (%s)", to, o.Executions, time.Since(began).Round(time.Second)))
		}
	}
	if _, err := conn.Exec(ctx, `SELECT setval('taskling.task_execution_id_seq', $1)`, o.Executions); err != nil {
		return s, fmt.Errorf("scale: advance the execution ids: %w", err)
	}
	s.Insert = time.Since(began)
	began = time.Now()
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) taskling.task_definition, taskling.task_execution,
    taskling.execution_end, taskling.task_execution_event`); err != nil {
		return s, fmt.Errorf("scale: vacuum: %w", err)
	}
	s.Vacuum = time.Since(began)
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM taskling.task_definition), (SELECT count(*) FROM taskling.task_execution),
    (SELECT count(*) FROM taskling.execution_end), (SELECT count(*) FROM taskling.task_execution_event)`).
		Scan(&s.Tasks, &s.Executions, &s.Ends, &s.Events)
	if err != nil {
		return s, fmt.Errorf("scale: count the seeded rows: %w", err)
	}
	return s, nil
}

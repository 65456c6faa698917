package scale

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingprom"
)

// TargetScrapeP50 is issue 28's target: the median Prometheus scrape with 1 000 tasks and 1 M
// submissions.
const TargetScrapeP50 = 100 * time.Millisecond

// submissionTasksSQL maps seeded task n to its id by its name (task-<n>): after the run, hosts
// have declared some tasks, so taskMapSQL's declared_by no longer finds them all.
const submissionTasksSQL = `CREATE TEMP TABLE scale_task ON COMMIT DROP AS
SELECT id, substring(task_name FROM 6)::int AS n FROM taskling.task_definition
WHERE application_name LIKE 'app%' AND task_name ~ '^task-[0-9]+$';
CREATE UNIQUE INDEX ON scale_task (n)`

// seedSubmissionsSQL adds $1 finished or waiting submissions over the seeded tasks (scale_task),
// task n's share falling as with the executions: by (i·37) mod 100, 0–84 completed, 85–89 dead,
// 90–94 cancelled, 95–99 waiting; a third have a reference value, and they were submitted over
// the last $2 seconds before $3.
const seedSubmissionsSQL = `
INSERT INTO taskling.submission (task_id, status, reference_value, header, max_attempts, attempts, submitted_at,
    updated_at, finished_at, last_error)
SELECT t.id, s.status, CASE WHEN s.i % 3 = 0 THEN 'ref-' || s.i END, jsonb_build_object('n', s.i), 3,
    CASE WHEN s.status = 1 THEN 0 ELSE 1 END, s.at, s.at, CASE WHEN s.status <> 1 THEN s.at END,
    CASE WHEN s.status = 4 THEN 'attempt 1 failed' END
FROM (
    SELECT i, floor($4 * power(((i * 2654435761) % 4294967296) / 4294967296.0, 2))::int AS n,
        CASE WHEN (i * 37) % 100 < 85 THEN 3 WHEN (i * 37) % 100 < 90 THEN 4 WHEN (i * 37) % 100 < 95 THEN 5 ELSE 1 END::smallint AS status,
        $3::timestamptz - make_interval(secs => ($1 - i)::float8 * $2::float8 / $1) AS at
    FROM generate_series(1, $1::bigint) i
) s JOIN scale_task t ON t.n = s.n`

// SeedSubmissions writes n submissions over the seeded tasks (in chunks, each in a transaction
// of its own) and vacuums the table.
func SeedSubmissions(ctx context.Context, pool *pgxpool.Pool, tasks, n int) (time.Duration, error) {
	began := time.Now()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, submissionTasksSQL); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, seedSubmissionsSQL, n, 7*86400, now, tasks); err != nil {
		return 0, fmt.Errorf("scale: seed submissions: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) taskling.submission`); err != nil {
		return 0, fmt.Errorf("scale: vacuum submissions: %w", err)
	}
	return time.Since(began), nil
}

// Scrape is the measurement of the metrics' scrape.
type Scrape struct {
	Submissions int64
	Seed        time.Duration
	Latencies   Latencies // one per scrape (Gather of tasklingprom's registry)
	Series      int       // series in the last scrape
}

// measureScrape seeds the submissions and times n scrapes of tasklingprom's registry for client.
func measureScrape(ctx context.Context, client *taskling.Client, pool *pgxpool.Pool, o Options) (*Scrape, error) {
	s := &Scrape{}
	var err error
	if s.Seed, err = SeedSubmissions(ctx, pool, o.Seed.Tasks, o.Submissions); err != nil {
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM taskling.submission`).Scan(&s.Submissions); err != nil {
		return nil, err
	}
	reg := tasklingprom.New(client).Registry()
	s.Latencies, err = timed(o.Scrapes, func(int) error {
		families, err := reg.Gather()
		s.Series = 0
		for _, f := range families {
			s.Series += len(f.GetMetric())
			if f.GetName() == "taskling_metrics_scrape_errors_total" && f.GetMetric()[0].GetCounter().GetValue() > 0 {
				return fmt.Errorf("scale: a scrape's database reads failed")
			}
		}
		return err
	})
	return s, err
}

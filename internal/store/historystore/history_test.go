package historystore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// TestAnExecutionsPageReadsTheIndexInOrder: with 20 000 executions of a task, half of them a
// submission's attempt (whose submission the page reads too), the page statement
// walks task_execution_task_started_idx in order and sorts nothing, for the first page and a later
// one, under custom and generic plans alike. Before, it sorted every older execution of the task
// (~1 s a page at 1.5 M). With a status filter the planner may still sort the rows that match,
// when it judges them few.
func TestAnExecutionsPageReadsTheIndexInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	_, err := pool.Exec(ctx, `
INSERT INTO taskling.task_definition (application_name, task_name) VALUES ('app', 'big'), ('app', 'small');
INSERT INTO taskling.task_execution (task_id, started_at, completed_at, last_keep_alive, host_name, death_mode, library_version)
SELECT d.id, now() - make_interval(secs => g), now(), now(), 'h', 1, 'x'
FROM generate_series(1, 20000) g, taskling.task_definition d WHERE d.task_name = 'big';
INSERT INTO taskling.submission (task_id, status, max_attempts, attempts, execution_id)
SELECT task_id, 3, 3, 1, id FROM taskling.task_execution WHERE id % 2 = 0;
INSERT INTO taskling.submission_attempt (submission_id, attempt, execution_id)
SELECT id, 1, execution_id FROM taskling.submission;
ANALYZE taskling.task_execution; ANALYZE taskling.submission_attempt`)
	require.NoError(t, err)
	var task, middle int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT task_id, id FROM taskling.task_execution ORDER BY started_at LIMIT 1 OFFSET 10000`).Scan(&task, &middle))
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `PREPARE page(bigint, bigint, text, int) AS `+executionsPageSQL)
	require.NoError(t, err)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err = conn.Exec(ctx, `SET plan_cache_mode = `+mode)
		require.NoError(t, err)
		for _, before := range []int64{0, middle} {
			// EXPLAIN takes no bind parameters: the test's own values, written in.
			rows, err := conn.Query(ctx, fmt.Sprintf(`EXPLAIN (COSTS OFF) EXECUTE page(%d, %d, '', 51)`, task, before))
			require.NoError(t, err)
			var lines []string
			for rows.Next() {
				var l string
				require.NoError(t, rows.Scan(&l))
				lines = append(lines, l)
			}
			require.NoError(t, rows.Err())
			plan := strings.Join(lines, "\n")
			require.Contains(t, plan, "Index Scan using task_execution_task_started_idx", "%s, before %d: %s", mode, before, plan)
			require.NotContains(t, plan, "Sort", "%s, before %d: %s", mode, before, plan)
		}
	}
}

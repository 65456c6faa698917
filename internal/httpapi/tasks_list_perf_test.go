package httpapi_test

import (
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestListTasksLatencyWithAThousandTasks measures GET /api/v1/tasks over 1 000 tasks and 100 000
// executions (a tenth of the tasks holding a slot). It runs when TASKLING_PERF=1 only.
func TestListTasksLatencyWithAThousandTasks(t *testing.T) {
	if os.Getenv("TASKLING_PERF") != "1" {
		t.Skip("set TASKLING_PERF=1 to measure")
	}
	b := setup(t, 2, nil)
	_, err := b.pool.Exec(b.ctx, `
INSERT INTO taskling.task_definition (application_name, task_name, declared_limit, declared_by)
SELECT 'app' || lpad((i % 20)::text, 2, '0'), 'task-' || lpad(i::text, 4, '0'), 2, 'seed'
FROM generate_series(1, 1000) i;
INSERT INTO taskling.task_execution (task_id, started_at, completed_at, last_keep_alive, host_name, death_mode,
    keep_alive_interval, keep_alive_death_threshold, override_threshold, library_version)
SELECT d.id, now() - i * interval '1 second', CASE WHEN i > 1000 THEN now() - i * interval '1 second' + interval '0.5 second' END,
    now(), 'seed-host', 2, interval '10 seconds', interval '1 hour', interval '1 hour', 'seed'
FROM generate_series(1, 100000) i
JOIN taskling.task_definition d ON d.task_name = 'task-' || lpad((1 + i % 1000)::text, 4, '0');
UPDATE taskling.task_definition d SET tokens = 'I:' || gen_random_uuid() || ',S:0,G:' || e.id || '|I:' || gen_random_uuid() || ',S:1,G:0'
FROM taskling.task_execution e WHERE e.task_id = d.id AND e.completed_at IS NULL AND d.id % 10 = 0;
ANALYZE taskling.task_definition; ANALYZE taskling.task_execution;`)
	require.NoError(t, err)
	for _, path := range []string{"/api/v1/tasks?limit=50", "/api/v1/tasks?sort=busy&limit=50", "/api/v1/tasks?status=busy&limit=50", "/api/v1/tasks?q=task-09&limit=50"} {
		var l taskList
		b.getJSON(t, path, &l)
		var took []time.Duration
		for range 200 {
			began := time.Now()
			status, body := b.do(t, "GET", path, "", "")
			took = append(took, time.Since(began))
			require.Equal(t, http.StatusOK, status, body)
		}
		slices.Sort(took)
		t.Logf("%s: total %d, page %d; p50 %s, p99 %s", path, l.Total, len(l.Tasks), took[100].Round(100*time.Microsecond), took[197].Round(100*time.Microsecond))
	}
}

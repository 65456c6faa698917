package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestCleanupCommandPrintsThenDeletes: a dry run prints what the keep settings let go and
// deletes nothing; the real run deletes exactly that; a keep override set with `tasks set`
// changes what goes; a bad keep value is a usage error.
func TestCleanupCommandPrintsThenDeletes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// The completed export 20 days old, the blocked start 2 days old.
	_, err = conn.Exec(ctx, `
WITH old AS (SELECT id FROM taskling.task_execution WHERE id = $1 OR blocked),
s AS (UPDATE taskling.task_execution e SET started_at = started_at - CASE WHEN blocked THEN interval '2 days' ELSE interval '20 days' END
      FROM old WHERE e.id = old.id)
UPDATE taskling.execution_end x SET ended_at = ended_at - interval '20 days' FROM old WHERE x.execution_id = old.id`, f.done.ID())
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM taskling.task_execution`).Scan(&n))
		return n
	}
	before := count()

	out := ok(t, f.url, "cleanup", "--dry-run", "billing/export")
	require.Contains(t, out, "WOULD DELETE")
	require.Regexp(t, `billing/export\s+14d/40d/1d\s+1\s+0\s+1\s+-\s+0`, out)
	require.Equal(t, before, count(), "a dry run deletes nothing")

	var res []cleanupJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, f.url, "cleanup", "-o", "json")), &res))
	var export cleanupJSON
	for _, r := range res {
		if r.Task == "export" {
			export = r
		}
	}
	require.Equal(t, int64(1), export.Completed)
	require.Equal(t, int64(1), export.Blocked)
	require.Equal(t, before-2, count())

	out = ok(t, f.url, "tasks", "set", "billing/export", "--keep-completed", "forever", "--keep-blocked", "36h")
	require.Contains(t, out, "Retention: completed forever, failed 40d, blocked 36h (override: completed, blocked)")
	code, _, errOut := cli(t, f.url, "tasks", "set", "billing/export", "--keep-failed", "soon")
	require.Equal(t, exitUsage, code)
	require.True(t, strings.Contains(errOut, "--keep-failed") && strings.Contains(errOut, `"soon"`), errOut)
	code, _, _ = cli(t, f.url, "cleanup", "billing/nosuch")
	require.Equal(t, exitNotFound, code)
}

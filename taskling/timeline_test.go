package taskling_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTimelineDrawsALongRunBehindAFloodOfDenials: a run that started two hours ago and ended in
// the window is drawn even when thousands of denied starts came after it.
func TestTimelineDrawsALongRunBehindAFloodOfDenials(t *testing.T) {
	t.Parallel()
	b := setup(t, noAutoCleanup(withLimit(1)))
	long := b.start(t, nil)
	b.exec(t, `UPDATE taskling.task_execution SET started_at = now() - interval '2 hours' WHERE id = $1`, long.ID())
	b.exec(t, `
INSERT INTO taskling.task_execution (task_id, started_at, completed_at, last_keep_alive, host_name, death_mode, library_version, blocked)
SELECT e.task_id, now() - interval '90 minutes' + g * interval '1 millisecond', now() - interval '90 minutes', now(), 'flood', 1, 'test', true
FROM taskling.task_execution e, generate_series(1, 3000) g WHERE e.id = $1`, long.ID())
	require.NoError(t, long.Complete(b.ctx))

	tl, err := b.client.TaskTimeline(b.ctx, b.app, b.task, time.Hour, 50)
	require.NoError(t, err)
	require.Len(t, tl.Bars, 1)
	require.Equal(t, long.ID(), tl.Bars[0].ExecutionID)
}

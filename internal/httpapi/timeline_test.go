package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestTaskPageDrawsTheSlotTimelineAndTheRates starts, completes, fails, denies and reclaims
// executions of a task with one slot, and finds each holder as a bar of the task page's timeline
// (linking to its execution, coloured by its outcome, the reclaim marked), and the grants,
// denials and reclaims in the per-minute chart.
func TestTaskPageDrawsTheSlotTimelineAndTheRates(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, nil)
	ctx := b.ctx

	completed := b.start(t, "export")
	require.NoError(t, completed.Complete(ctx))
	failed := b.start(t, "export")
	require.NoError(t, failed.RecordError(ctx, "boom", true))
	require.NoError(t, failed.Complete(ctx))

	// A holder in Override mode sends no heartbeat: dead once its threshold passes, its slot is
	// reclaimed by the next start. Before that, a start is denied.
	silent, err := taskling.NewClient(b.pool, &taskling.Config{HostName: "silent-host", Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 1, DeathMode: taskling.DeathModeOverride, OverrideThreshold: 1500 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(silent.Close)
	dead, err := silent.StartExecution(ctx, "app", "export", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dead.Complete(context.Background()) })
	_, err = b.client.StartExecution(ctx, "app", "export", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached)
	var running *taskling.Execution
	require.Eventually(t, func() bool {
		running, err = b.client.StartExecution(ctx, "app", "export", nil)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the dead holder's slot is reclaimed")
	t.Cleanup(func() { _ = running.Complete(context.Background()) })

	status, page := b.do(t, "GET", "/tasks/app/export", "", "")
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, `<svg class="timeline" id="slot-timeline"`)
	require.Contains(t, page, `<dd id="retention">completed 14d, failed 40d, blocked 1d; never cleaned</dd>`)
	bar := func(id int64, class string) {
		t.Helper()
		require.Contains(t, page, fmt.Sprintf(`<a href="../../executions/%d" class="bar-link"><rect class="bar %s" id="bar-%d"`, id, class, id))
	}
	bar(completed.ID(), "completed")
	bar(failed.ID(), "failed")
	bar(dead.ID(), "dead reclaimed")
	bar(running.ID(), "in_progress")
	require.Equal(t, 4, strings.Count(page, `<rect class="bar `), "one bar per holder; the denied start has none")
	require.Contains(t, page, fmt.Sprintf(`id="reclaim-%d"`, dead.ID()), "the reclaim is marked")
	require.Contains(t, page, fmt.Sprintf("execution #%d on silent-host", dead.ID()), "the bar's tooltip")
	require.Contains(t, page, "slot 1", "one lane: the task's one slot")
	require.NotContains(t, page, "slot 2")
	require.NotContains(t, page, `id="timeline-truncated"`)

	require.Contains(t, page, `<svg class="rates" id="rate-chart"`)
	total := func(series string) int {
		t.Helper()
		m := regexp.MustCompile(`id="total-` + series + `">([0-9]+)<`).FindStringSubmatch(page)
		require.NotNil(t, m, series)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 4, total("grants"))
	require.GreaterOrEqual(t, total("denials"), 1, "the denied start, and those that waited for the reclaim")
	require.Equal(t, 1, total("reclaims"))
	// All in the last minute or two: one bar of each series a minute.
	require.Contains(t, page, `<rect class="rate grants"`)
	require.Contains(t, page, `<rect class="rate denials"`)
	require.Contains(t, page, `<rect class="rate reclaims"`)
	require.Contains(t, page, " reclaimed</title></g>", "each minute has its tooltip")
}

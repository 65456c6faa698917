package httpapi

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

var t0 = time.Date(2026, 11, 20, 14, 0, 0, 0, time.UTC)

func at(min float64) time.Time { return t0.Add(time.Duration(min * float64(time.Minute))) }

func TestPackLanesTakesTheLowestFreeLaneByStartTime(t *testing.T) {
	spans := []span{
		{at(5), at(9)},   // 0: lane 1 (starts after #3)
		{at(0), at(10)},  // 1: lane 0
		{at(10), at(12)}, // 2: lane 0 again: a lane is free when its bar ended at the start
		{at(1), at(4)},   // 3: lane 1
		{at(2), at(3)},   // 4: lane 2
		{at(3), at(20)},  // 5: lane 2: #4 ended at 3
		{at(6), at(7)},   // 6: lane 3: 0, 1 and 2 busy
	}
	lanes, n := packLanes(spans)
	require.Equal(t, []int{1, 0, 0, 1, 2, 2, 3}, lanes)
	require.Equal(t, 4, n)

	lanes, n = packLanes(nil)
	require.Empty(t, lanes)
	require.Zero(t, n)

	// Sequential holders of one slot share one lane; simultaneous starts are taken in order.
	lanes, n = packLanes([]span{{at(0), at(1)}, {at(1), at(2)}, {at(2), at(2)}, {at(2), at(3)}})
	require.Equal(t, []int{0, 0, 0, 0}, lanes)
	require.Equal(t, 1, n)
	lanes, n = packLanes([]span{{at(0), at(1)}, {at(0), at(1)}, {at(0), at(1)}})
	require.Equal(t, []int{0, 1, 2}, lanes)
	require.Equal(t, 3, n)
}

func TestPackLanesNeverOverlapsBarsInALane(t *testing.T) {
	var spans []span
	for i := range 500 {
		start := at(float64((i * 37) % 60))
		spans = append(spans, span{start, start.Add(time.Duration(1+(i*13)%7) * time.Minute)})
	}
	lanes, n := packLanes(spans)
	depth := 0 // the most spans running at one instant (a span's start)
	for i, a := range spans {
		running := 0
		for j, b := range spans {
			if !b.start.After(a.start) && (a.start.Before(b.end) || i == j) {
				running++
			}
			if i < j && lanes[i] == lanes[j] {
				require.False(t, a.start.Before(b.end) && b.start.Before(a.end), "spans %d and %d overlap in lane %d", i, j, lanes[i])
			}
		}
		depth = max(depth, running)
	}
	require.Equal(t, depth, n, "greedy by start time uses as many lanes as the deepest overlap")
}

func TestBucketMinutesSumsEachMinuteOfTheLastHour(t *testing.T) {
	now := at(59.5) // 14:59:30: the buckets are 14:00 … 14:59
	counts := []taskling.TimelineMinute{
		{Minute: at(0), Grants: 3, Denials: 1},
		{Minute: at(0), Reclaims: 2}, // the same minute, from the reclaims: added
		{Minute: at(30), Grants: 5},
		{Minute: at(59), Denials: 4},
		{Minute: at(-1), Grants: 100}, // before the first bucket
		{Minute: at(60), Grants: 100}, // after now's minute
	}
	b := bucketMinutes(now, counts, 60)
	require.Len(t, b, 60)
	require.Equal(t, at(0), b[0].Minute)
	require.Equal(t, at(59), b[59].Minute)
	require.Equal(t, minuteBucket{Minute: at(0), Grants: 3, Denials: 1, Reclaims: 2}, b[0])
	require.Equal(t, int64(5), b[30].Grants)
	require.Equal(t, int64(4), b[59].Denials)
	var total int64
	for _, m := range b {
		total += m.Grants + m.Denials + m.Reclaims
	}
	require.Equal(t, int64(3+1+2+5+4), total)

	// A time zone other than UTC buckets the same instants.
	zone := time.FixedZone("x", 5*3600+30*60)
	require.Equal(t, b, bucketMinutes(now.In(zone), counts, 60))
}

func TestLayoutTimelineDrawsBarsInTheirLanes(t *testing.T) {
	tl := taskling.TaskTimeline{From: at(0), Now: at(60), Bars: []taskling.TimelineBar{
		{ExecutionID: 3, Host: "h<script>", StartedAt: at(50), Status: taskling.StatusInProgress},
		{ExecutionID: 2, Host: "h", StartedAt: at(20), EndedAt: at(50), ReclaimedAt: at(50), Status: "dead"},
		{ExecutionID: 1, Host: "h", StartedAt: at(-30), EndedAt: at(15), Status: taskling.StatusCompleted},
	}, Minutes: []taskling.TimelineMinute{{Minute: at(50), Grants: 1, Reclaims: 1}, {Minute: at(20), Grants: 1, Denials: 2}}}
	v := layoutTimeline(tl, 2)
	require.Equal(t, "slot", v.LaneName)
	require.Len(t, v.Lanes, 2, "a limited task shows a lane per slot")
	require.Len(t, v.Bars, 3)
	byID := map[int64]barView{}
	for _, b := range v.Bars {
		byID[b.ID] = b
	}
	require.Equal(t, "64.0", byID[1].X, "a bar that started before the window is clipped to it")
	require.Equal(t, byID[1].Y, byID[2].Y, "#2 started after #1 ended: same lane")
	require.Equal(t, byID[2].Y, byID[3].Y, "#3 took the reclaimed slot at the reclaim")
	require.True(t, byID[2].Reclaimed)
	require.NotEmpty(t, byID[2].MarkPath)
	require.Equal(t, "in_progress", byID[3].Outcome)
	require.Contains(t, byID[3].Title, "running for 10m0s")
	require.Contains(t, byID[2].Title, "reclaimed 2026-11-20 14:50:00Z")
	require.Equal(t, int64(2), v.Chart.Totals.Grants)
	require.Equal(t, int64(2), v.Chart.Totals.Denials)
	require.Equal(t, int64(1), v.Chart.Totals.Reclaims)
	require.Equal(t, int64(2), v.Chart.Max)
	var labels []string
	for _, tk := range v.Ticks {
		labels = append(labels, tk.Label)
	}
	require.Equal(t, "14:10 14:20 14:30 14:40 14:50 15:00", strings.Join(labels, " "))

	unlimited := layoutTimeline(tl, -1)
	require.Equal(t, "lane", unlimited.LaneName)
	require.Len(t, unlimited.Lanes, 1, "an unlimited task has as many lanes as concurrent holders")
}

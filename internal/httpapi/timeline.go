package httpapi

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/tasklingtype"
)

// The task page's slot timeline and its grants / denials / reclaims per minute, both drawn on the
// server as inline SVG (the page needs no script for them). The template (task.html) writes the
// SVG elements from the coordinates computed here, so html/template escapes every text.

const (
	// timelineWindow is how far back the task page looks.
	timelineWindow = time.Hour
	// timelineMaxBars bounds the bars drawn (the newest).
	timelineMaxBars = 2000
	// timelineMinutes is the number of minute buckets of the chart (the last is the current one).
	timelineMinutes = 60
	// maxEmptyLanes: a limited task shows a lane for each of its slots, used or not, when its
	// limit is at most this.
	maxEmptyLanes = 50
)

// SVG geometry, in viewBox units.
const (
	svgWidth    = 1000.0
	plotLeft    = 64.0
	plotRight   = 992.0
	plotTop     = 4.0
	axisHeight  = 22.0
	maxLaneH    = 18.0
	minLaneH    = 2.0
	lanesHeight = 320.0 // lanes share this height until they reach minLaneH each
	minBarW     = 1.5
	chartHeight = 120.0
)

// span is a bar's extent in time.
type span struct{ start, end time.Time }

// packLanes assigns each span a lane, greedily by start time: a span takes the lowest lane whose
// previous span ended at or before its start, or a new lane. Spans starting together are taken in
// the order given. It returns the lane of each span (indexed like spans) and the number of lanes.
func packLanes(spans []span) (lanes []int, n int) {
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return spans[a].start.Compare(spans[b].start) })
	lanes = make([]int, len(spans))
	var ends []time.Time // the end of each lane's last span
	for _, i := range order {
		lane := -1
		for l, end := range ends {
			if !end.After(spans[i].start) {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(ends)
			ends = append(ends, time.Time{})
		}
		ends[lane] = spans[i].end
		lanes[i] = lane
	}
	return lanes, len(ends)
}

// minuteBucket is one minute of the chart.
type minuteBucket struct {
	Minute                    time.Time
	Grants, Denials, Reclaims int64
}

// bucketMinutes adds the counts up into n minute buckets ending with the minute of now (UTC):
// counts of the same minute are summed, counts outside the buckets dropped.
func bucketMinutes(now time.Time, counts []tasklingtype.TimelineMinute, n int) []minuteBucket {
	last := now.UTC().Truncate(time.Minute)
	first := last.Add(-time.Duration(n-1) * time.Minute)
	out := make([]minuteBucket, n)
	for i := range out {
		out[i].Minute = first.Add(time.Duration(i) * time.Minute)
	}
	for _, c := range counts {
		d := c.Minute.Sub(first)
		i := int(d / time.Minute)
		if d < 0 || i >= n {
			continue
		}
		out[i].Grants += c.Grants
		out[i].Denials += c.Denials
		out[i].Reclaims += c.Reclaims
	}
	return out
}

// timelineView is the slot timeline as the template draws it.
type timelineView struct {
	Width, Height, PlotLeft, PlotRight, PlotW, AxisY string
	From, Now                                        time.Time
	Lanes                                            []laneView
	Bars                                             []barView
	Ticks                                            []tickView
	// LaneName is "slot" for a limited task, else "lane".
	LaneName  string
	Shown     int
	Truncated bool
	Counts    map[string]int // bars by outcome
	Chart     chartView
}

type laneView struct {
	Y, LabelY, Height string
	Label             string
	Odd               bool
}

type barView struct {
	ID                 int64
	X, Y, W, H         string
	Outcome            string // completed, failed, dead, in_progress
	Reclaimed          bool
	MarkX, MarkY       string
	MarkPath           string
	Title              string
	StartedAt, EndedAt time.Time
}

type tickView struct {
	X, LabelX, Label string
}

// chartView is the per-minute chart.
type chartView struct {
	Width, Height, PlotLeft, PlotRight, BaseY, TopY, PlotH string
	Max                                                    int64
	MaxLabel                                               string
	Minutes                                                []chartMinute
	Ticks                                                  []tickView
	Totals                                                 minuteBucket
}

type chartMinute struct {
	X, W, Title string
	Bars        []chartBar
}

type chartBar struct {
	Series     string // grants, denials, reclaims
	X, Y, W, H string
}

func num(f float64) string { return fmt.Sprintf("%.1f", f) }

// loadTimeline reads the task's last hour and lays it out; limit is the task's limit in force
// (-1 unlimited, 0 none).
func loadTimeline(ctx context.Context, c *taskling.Client, app, task string, limit int) (timelineView, error) {
	tl, err := c.TaskTimeline(ctx, app, task, timelineWindow, timelineMaxBars)
	if err != nil {
		return timelineView{}, err
	}
	return layoutTimeline(tl, limit), nil
}

// layoutTimeline computes the coordinates of the timeline and the chart.
func layoutTimeline(tl tasklingtype.TaskTimeline, limit int) timelineView {
	v := timelineView{From: tl.From, Now: tl.Now, Shown: len(tl.Bars), Truncated: tl.Truncated, LaneName: "lane",
		Counts: map[string]int{}, Width: num(svgWidth), PlotLeft: num(plotLeft), PlotRight: num(plotRight), PlotW: num(plotRight - plotLeft)}
	window := tl.Now.Sub(tl.From)
	if window <= 0 {
		window = timelineWindow
	}
	plotW := plotRight - plotLeft
	xOf := func(t time.Time) float64 {
		if t.Before(tl.From) {
			t = tl.From
		}
		if t.After(tl.Now) {
			t = tl.Now
		}
		return plotLeft + float64(t.Sub(tl.From))/float64(window)*plotW
	}

	spans := make([]span, len(tl.Bars))
	for i, b := range tl.Bars {
		end := b.EndedAt
		if end.IsZero() || end.After(tl.Now) {
			end = tl.Now
		}
		if end.Before(b.StartedAt) {
			end = b.StartedAt
		}
		spans[i] = span{b.StartedAt, end}
	}
	lanes, n := packLanes(spans)
	if limit > 0 {
		v.LaneName = "slot"
		if limit <= maxEmptyLanes && n < limit {
			n = limit
		}
	}
	if n == 0 {
		n = 1
	}
	laneH := min(maxLaneH, max(minLaneH, lanesHeight/float64(n)))
	axisY := plotTop + float64(n)*laneH
	v.AxisY = num(axisY)
	v.Height = num(axisY + axisHeight)
	for l := range n {
		y := plotTop + float64(l)*laneH
		lv := laneView{Y: num(y), Height: num(laneH), LabelY: num(y + laneH/2 + 4), Odd: l%2 == 1}
		if laneH >= 11 {
			lv.Label = fmt.Sprintf("%s %d", v.LaneName, l+1)
		}
		v.Lanes = append(v.Lanes, lv)
	}
	barH := max(1, laneH-2)
	if laneH < 6 {
		barH = laneH
	}
	for i, b := range tl.Bars {
		x0, x1 := xOf(spans[i].start), xOf(spans[i].end)
		w := max(minBarW, x1-x0)
		if x0+w > plotRight {
			x0 = plotRight - w
		}
		y := plotTop + float64(lanes[i])*laneH + (laneH-barH)/2
		outcome := string(b.Status)
		switch outcome {
		case "completed", "failed", "dead", "in_progress":
		default:
			outcome = "dead"
		}
		bv := barView{ID: b.ExecutionID, X: num(x0), Y: num(y), W: num(w), H: num(barH), Outcome: outcome,
			StartedAt: b.StartedAt, EndedAt: b.EndedAt, Reclaimed: !b.ReclaimedAt.IsZero()}
		if bv.Reclaimed {
			// A cross at the reclaim, on the bar's end.
			mx, my, r := xOf(b.ReclaimedAt), y+barH/2, max(2.5, min(5, barH/2+1))
			bv.MarkX, bv.MarkY = num(mx), num(my)
			bv.MarkPath = fmt.Sprintf("M%s %sL%s %sM%s %sL%s %s", num(mx-r), num(my-r), num(mx+r), num(my+r), num(mx-r), num(my+r), num(mx+r), num(my-r))
		}
		bv.Title = barTitle(b, spans[i].end)
		v.Counts[outcome]++
		if bv.Reclaimed {
			v.Counts["reclaimed"]++
		}
		v.Bars = append(v.Bars, bv)
	}
	v.Ticks = timeTicks(tl.From, tl.Now, xOf)
	v.Chart = layoutChart(bucketMinutes(tl.Now, tl.Minutes, timelineMinutes))
	return v
}

// barTitle is a bar's tooltip.
func barTitle(b tasklingtype.TimelineBar, end time.Time) string {
	s := fmt.Sprintf("execution #%d on %s\nstarted %s\n", b.ExecutionID, b.Host, clock(b.StartedAt))
	if b.Key != "" || b.Cost > 1 {
		s += fmt.Sprintf("key %q, cost %d\n", b.Key, b.Cost)
	}
	switch {
	case !b.ReclaimedAt.IsZero():
		s += fmt.Sprintf("reclaimed %s (judged dead after %s)\n", clock(b.ReclaimedAt), b.ReclaimedAt.Sub(b.StartedAt).Round(time.Second))
	case b.EndedAt.IsZero():
		s += fmt.Sprintf("running for %s\n", end.Sub(b.StartedAt).Round(time.Second))
	default:
		s += fmt.Sprintf("ended %s (%s)\n", clock(b.EndedAt), b.EndedAt.Sub(b.StartedAt).Round(time.Millisecond))
	}
	outcome := string(b.Status)
	if outcome == "in_progress" {
		outcome = "running"
	}
	s += outcome
	if b.FencingToken != 0 {
		s += fmt.Sprintf(", fence %d", b.FencingToken)
	}
	return s
}

// timeTicks labels the axis every 10 minutes of the clock (UTC).
func timeTicks(from, now time.Time, xOf func(time.Time) float64) []tickView {
	step := 10 * time.Minute
	if now.Sub(from) < 20*time.Minute {
		step = time.Minute
	}
	var out []tickView
	for t := from.UTC().Truncate(step).Add(step); !t.After(now); t = t.Add(step) {
		x := xOf(t)
		out = append(out, tickView{X: num(x), LabelX: num(x), Label: t.Format("15:04")})
	}
	return out
}

// layoutChart lays out the per-minute chart: for each minute three bars side by side (grants,
// denials, reclaims), scaled to the busiest minute.
func layoutChart(buckets []minuteBucket) chartView {
	top, base := 8.0, chartHeight-axisHeight
	c := chartView{Width: num(svgWidth), Height: num(chartHeight), PlotLeft: num(plotLeft), PlotRight: num(plotRight),
		BaseY: num(base), TopY: num(top), PlotH: num(base - top)}
	for _, b := range buckets {
		c.Max = max(c.Max, b.Grants, b.Denials, b.Reclaims)
		c.Totals.Grants += b.Grants
		c.Totals.Denials += b.Denials
		c.Totals.Reclaims += b.Reclaims
	}
	scale := 1.0
	if c.Max > 0 {
		scale = (base - top) / float64(c.Max)
	}
	c.MaxLabel = fmt.Sprint(c.Max)
	if len(buckets) == 0 {
		return c
	}
	colW := (plotRight - plotLeft) / float64(len(buckets))
	barW := (colW - 2) / 3
	for i, b := range buckets {
		x := plotLeft + float64(i)*colW
		m := chartMinute{X: num(x), W: num(colW),
			Title: fmt.Sprintf("%s: %d granted, %d blocked, %d reclaimed", b.Minute.Format("15:04"), b.Grants, b.Denials, b.Reclaims)}
		for j, s := range []struct {
			name string
			n    int64
		}{{"grants", b.Grants}, {"denials", b.Denials}, {"reclaims", b.Reclaims}} {
			if s.n == 0 {
				continue
			}
			h := max(1, float64(s.n)*scale)
			m.Bars = append(m.Bars, chartBar{Series: s.name, X: num(x + 1 + float64(j)*barW), Y: num(base - h), W: num(barW), H: num(h)})
		}
		c.Minutes = append(c.Minutes, m)
		if b.Minute.Minute()%10 == 0 {
			c.Ticks = append(c.Ticks, tickView{X: num(x), LabelX: num(x), Label: b.Minute.Format("15:04")})
		}
	}
	return c
}

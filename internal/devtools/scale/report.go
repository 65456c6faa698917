package scale

import (
	"fmt"
	"io"
	"time"
)

// Targets of issue 13.
const (
	TargetLastP99    = 5 * time.Millisecond
	TargetAPIP99     = 50 * time.Millisecond
	TargetRatio      = 2.0
	TargetRowsPerSec = 5000.0
)

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// Misses counts the timing targets missed.
func (r *Report) Misses() int {
	n := 0
	for _, ok := range r.targets() {
		if !ok {
			n++
		}
	}
	return n
}

func (r *Report) targets() []bool {
	out := []bool{r.Before.Last.Percentile(99) < TargetLastP99}
	for _, l := range r.Before.API {
		out = append(out, l.Percentile(99) < TargetAPIP99)
	}
	out = append(out, r.Ratio() <= TargetRatio, r.RowsPerSecond() >= TargetRowsPerSec)
	if r.Scrape != nil {
		out = append(out, r.Scrape.Latencies.Percentile(50) <= TargetScrapeP50)
	}
	return out
}

// Print writes the report.
func (r *Report) Print(w io.Writer) {
	s := r.Seeded
	fmt.Fprintf(w, "seeded %d tasks, %d executions (%d ends, %d events) in %s, + VACUUM ANALYZE %s; %d slots held throughout\n",
		s.Tasks, s.Executions, s.Ends, s.Events, s.Insert.Round(time.Millisecond), s.Vacuum.Round(time.Millisecond), r.Holders)
	r.printReads(w, "before the cleanup", r.Before, true)
	if r.After != nil {
		r.printReads(w, "after the cleanup", *r.After, false)
	}
	r.printAcquire(w)
	r.printCleanup(w)
}

func (r *Report) printScrape(w io.Writer) {
	s := r.Scrape
	if s == nil {
		return
	}
	p50 := s.Latencies.Percentile(50)
	fmt.Fprintf(w, "\nmetrics scrape (tasklingprom, %d series): %d tasks, %d submissions (seeded in %s), %d executions left\n",
		s.Series, r.Seeded.Tasks, s.Submissions, s.Seed.Round(time.Millisecond), r.Seeded.Executions-r.Cleanup.Completed-r.Cleanup.Failed-r.Cleanup.Blocked)
	fmt.Fprintf(w, "  ×%d: p50 %s, max %s   median ≤ %s: %s\n", len(s.Latencies), ms(p50), ms(s.Latencies.Percentile(100)),
		TargetScrapeP50, verdict(p50 <= TargetScrapeP50))
}

func (r *Report) printReads(w io.Writer, when string, rd Reads, targets bool) {
	fmt.Fprintf(w, "\nreads %s (%d executions)%*s p50       p99       max\n", when, rd.Executions, max(0, 26-len(when)), "")
	row := func(name string, l Latencies, target time.Duration) {
		fmt.Fprintf(w, "  %-52s %9s %9s %9s", fmt.Sprintf("%s ×%d", name, len(l)), ms(l.Percentile(50)), ms(l.Percentile(99)), ms(l.Percentile(100)))
		if targets {
			fmt.Fprintf(w, "   p99 < %s: %s", target, verdict(l.Percentile(99) < target))
		}
		fmt.Fprintln(w)
	}
	row(fmt.Sprintf("LastExecutions(%d), random tasks", r.Options.LastN), rd.Last, TargetLastP99)
	for i, p := range APIPaths {
		row("GET "+p, rd.API[i], TargetAPIP99)
	}
}

func (r *Report) printAcquire(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "\nacquire: StartExecution + Complete, %d goroutines on %d tasks (limit %d each)    cycles       p50       p99       max\n",
		o.AcquireTasks*o.PerTask, o.AcquireTasks, o.PerTask)
	row := func(name string, l Latencies) {
		fmt.Fprintf(w, "  %-64s %8d %9s %9s %9s\n", name, len(l), ms(l.Percentile(50)), ms(l.Percentile(99)), ms(l.Percentile(100)))
	}
	row(fmt.Sprintf("without cleanup: before it (%s)", r.BaselineTook.Round(time.Second/10)), r.AcquireBefore)
	row(fmt.Sprintf("without cleanup: its pauses (%d × %s)", r.Pauses, o.Pause), r.AcquirePaused)
	row("without cleanup: both", r.Without())
	row(fmt.Sprintf("while the cleanup runs (%s)", r.CleanupActive().Round(time.Millisecond)), r.AcquireDuring)
	ratio := func(l Latencies) float64 {
		if l.Percentile(99) <= 0 {
			return 0
		}
		return float64(r.AcquireDuring.Percentile(99)) / float64(l.Percentile(99))
	}
	fmt.Fprintf(w, "  p99 with / without cleanup: %.2f× (vs before it %.2f×, vs its pauses %.2f×)   ≤ %.0f×: %s\n",
		r.Ratio(), ratio(r.AcquireBefore), ratio(r.AcquirePaused), TargetRatio, verdict(r.Ratio() <= TargetRatio))
	fmt.Fprintf(w, "  denied %d, cycles across a phase change (not counted) %d\n", r.Denied, r.Straddled)
}

func (r *Report) printCleanup(w io.Writer) {
	c, e := r.Cleanup, r.Expected
	fmt.Fprintf(w, "\ncleanup of every task: %d rows deleted (%d completed, %d failed/dead, %d blocked; %d cron instants kept)\n",
		c.Rows(), c.Completed, c.Failed, c.Blocked, c.Instants)
	fmt.Fprintf(w, "  in %s running (%s wall, %d pauses, %d batches): %.0f rows/s   ≥ %.0f rows/s: %s\n",
		r.CleanupActive().Round(time.Millisecond), r.CleanupWall.Round(time.Millisecond), r.Pauses, r.Batches,
		r.RowsPerSecond(), TargetRowsPerSec, verdict(r.RowsPerSecond() >= TargetRowsPerSec))
	fmt.Fprintf(w, "  expected (computed apart): %d completed, %d failed/dead, %d blocked, %d instants, %d events; kept %d, of which %d past retention but protected\n",
		e.Completed, e.Failed, e.Blocked, e.Instants, e.Events, e.Kept, e.ProtectedOld)
	fmt.Fprintf(w, "  tables (executions, ends, events, indexes): %.0f MB before, %.0f MB after (space reused, not returned); %d events left; tasks skipped %d\n",
		float64(r.TableBytes[0])/(1<<20), float64(r.TableBytes[1])/(1<<20), r.Check.EventsLeft, r.Skipped)
	fmt.Fprintf(w, "  autovacuum runs on them by the end: %d; dead rows still in them: %d\n", r.Autovacuums, r.DeadRows)
	if r.Check.OK() {
		fmt.Fprintln(w, "  verification: OK (deleted exactly what retention lets go; every protected execution remains)")
	} else {
		fmt.Fprintf(w, "  verification: FAILED\n")
		for _, p := range r.Check.Problems {
			fmt.Fprintf(w, "    %s\n", p)
		}
	}
	r.printScrape(w)
	fmt.Fprintf(w, "\ntargets missed: %d of %d\n", r.Misses(), len(r.targets()))
}

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/taskling"
)

// cleanupTimeout is the default time limit of `taskling cleanup`: deleting millions of rows takes
// minutes, not the 30 s of other commands.
const cleanupTimeout = time.Hour

func newCleanupCommand(e *env) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "cleanup [APP/TASK] [--dry-run]",
		Short: "Delete the history that the tasks' keep settings let go (all tasks, or one)",
		Long: `Delete now, by each task's keep settings (KeepCompleted, KeepFailed, KeepBlocked: operator
overrides over what its hosts declare), the executions past retention with their events, ends,
block attempts and completed blocks, and finished submissions — in transactions of at most 1 000
executions, so that starts never wait behind it. Clients do the same automatically, each task at
most once per Config.CleanupInterval fleet-wide; a task another host is cleaning now is skipped.

Never deleted: an execution that has not ended, the latest and the latest scheduled execution of
a task, executions of blocks not completed, attempts of waiting or running submissions, the latest
block of each kind, succeeded idempotent references; a submission with a reference value loses
only its header. Cron instants of deleted executions are remembered (Backfill skips them).

--dry-run prints what would be deleted and deletes nothing. A run longer than a second shows its
progress on stderr — the rows deleted so far over every task, their rate, the tasks cleaned and
the one in progress — redrawn in place on a terminal, else a line every second.
The default --timeout of this command is 1h.`,
	}
	target := addTaskTarget(cmd, true)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := target.resolve(args)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("timeout") && !cmd.Root().PersistentFlags().Changed("timeout") {
			e.timeout = cleanupTimeout
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			p := &cleanupProgress{w: e.rawStderr, terminal: isTerminal(e.rawStderr, e.getenv), dryRun: dryRun,
				began: time.Now(), rows: map[string]int64{}}
			res, err := c.Cleanup(ctx, app, task, &taskling.CleanupOptions{DryRun: dryRun, Progress: p.batch})
			p.done()
			if perr := e.printCleanup(res, dryRun); err == nil {
				err = perr
			}
			return err
		})
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be deleted; delete nothing")
	return cmd
}

// cleanupJSON is one task's line of `taskling cleanup -o json`.
type cleanupJSON struct {
	Application   string `json:"application"`
	Task          string `json:"task"`
	KeepCompleted string `json:"keep_completed"`
	KeepFailed    string `json:"keep_failed"`
	KeepBlocked   string `json:"keep_blocked"`
	DryRun        bool   `json:"dry_run"`
	Completed     int64  `json:"completed"`
	Failed        int64  `json:"failed"`
	Blocked       int64  `json:"blocked"`
	Blocks        int64  `json:"blocks"`
	Submissions   int64  `json:"submissions"`
	Compacted     int64  `json:"submissions_compacted"`
	Instants      int64  `json:"cron_instants_remembered"`
	Skipped       string `json:"skipped,omitempty"`
}

func (e *env) printCleanup(res []taskling.TaskCleanup, dryRun bool) error {
	if e.output == "json" {
		out := make([]cleanupJSON, 0, len(res))
		for _, r := range res {
			out = append(out, cleanupJSON{Application: r.Application, Task: r.Task, KeepCompleted: taskling.FormatKeep(r.Keep.Completed),
				KeepFailed: taskling.FormatKeep(r.Keep.Failed), KeepBlocked: taskling.FormatKeep(r.Keep.Blocked), DryRun: dryRun,
				Completed: r.Counts.Completed, Failed: r.Counts.Failed, Blocked: r.Counts.Blocked, Blocks: r.Counts.Blocks,
				Submissions: r.Counts.Submissions, Compacted: r.Counts.Compacted, Instants: r.Counts.Instants, Skipped: r.Skipped})
		}
		return printJSON(e.stdout, out)
	}
	verb := "DELETED"
	if dryRun {
		verb = "WOULD DELETE"
	}
	t := newTable(e.stdout, "TASK", "KEEP (completed/failed/blocked)", verb+": COMPLETED", "FAILED", "BLOCKED", "BLOCKS", "SUBMISSIONS", "NOTE")
	var total taskling.CleanupCounts
	for _, r := range res {
		note := r.Skipped
		if note == "" && r.Counts.Compacted > 0 {
			note = fmt.Sprintf("%d submissions kept without header (reference value)", r.Counts.Compacted)
		}
		t.row(r.Application+"/"+r.Task, taskling.FormatKeep(r.Keep.Completed)+"/"+taskling.FormatKeep(r.Keep.Failed)+"/"+taskling.FormatKeep(r.Keep.Blocked),
			fmt.Sprint(r.Counts.Completed), fmt.Sprint(r.Counts.Failed), fmt.Sprint(r.Counts.Blocked), blocksCell(r.Counts.Blocks, dryRun),
			fmt.Sprint(r.Counts.Submissions), note)
		total.Completed += r.Counts.Completed
		total.Failed += r.Counts.Failed
		total.Blocked += r.Counts.Blocked
		total.Blocks += r.Counts.Blocks
		total.Submissions += r.Counts.Submissions
	}
	if len(res) > 1 {
		t.row("total", "", fmt.Sprint(total.Completed), fmt.Sprint(total.Failed), fmt.Sprint(total.Blocked), blocksCell(total.Blocks, dryRun),
			fmt.Sprint(total.Submissions), "")
	}
	return t.flush()
}

// blocksCell: a dry run does not count blocks (they go with the executions that completed them).
func blocksCell(n int64, dryRun bool) string {
	if dryRun {
		return "-"
	}
	return fmt.Sprint(n)
}

// cleanupProgress shows a long cleanup's progress on stderr: the rows deleted over every task so
// far, their rate, the tasks seen and the one in progress; redrawn in place on a terminal, else a
// line a second. A cleanup shorter than a second shows nothing.
type cleanupProgress struct {
	w        io.Writer // raw: it writes its own control sequences
	terminal bool
	dryRun   bool
	began    time.Time
	last     time.Time
	rows     map[string]int64 // task → its rows so far
	shown    bool
}

// batch is CleanupOptions.Progress.
func (p *cleanupProgress) batch(app, task string, soFar taskling.CleanupCounts) {
	p.rows[app+"/"+task] = soFar.Rows()
	now := time.Now()
	if now.Sub(p.began) < time.Second || now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	var total int64
	for _, n := range p.rows {
		total += n
	}
	verb := "deleted"
	if p.dryRun {
		verb = "to delete"
	}
	took := now.Sub(p.began)
	line := fmt.Sprintf("cleanup: %s rows %s in %s (%s rows/s); %d tasks so far, now %s", groupDigits(total), verb,
		took.Round(time.Second), groupDigits(int64(float64(total)/took.Seconds())), len(p.rows), terminalSafe(app+"/"+task))
	if p.terminal {
		fmt.Fprint(p.w, "\r\x1b[2K"+line)
		p.shown = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// done ends a redrawn line.
func (p *cleanupProgress) done() {
	if p.shown {
		fmt.Fprintln(p.w)
	}
}
